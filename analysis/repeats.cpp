#include "analysis/repeats.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "trainers/records.h"
#include "workloads/workload.h"

namespace quartet::analysis {

using nlohmann::json;
using trainers::member;

namespace {

// The continued fraction of the incomplete beta function (modified Lentz), converging
// fast for x < (a + 1) / (a + b + 2).
double beta_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300, kEps = 1e-16;
  double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
  if (std::abs(d) < kTiny) d = kTiny;
  d = 1.0 / d;
  double h = d;
  for (int m = 1; m <= 1000; ++m) {
    const double m2 = 2.0 * m;
    for (const double aa : {m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
                            -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))}) {
      d = 1.0 + aa * d;
      if (std::abs(d) < kTiny) d = kTiny;
      c = 1.0 + aa / c;
      if (std::abs(c) < kTiny) c = kTiny;
      d = 1.0 / d;
      h *= d * c;
      if (aa < 0 && std::abs(d * c - 1.0) < kEps) return h;
    }
  }
  return h;
}

// I_x(a, b), the regularized incomplete beta function.
double incomplete_beta(double a, double b, double x) {
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_fraction(a, b, x) / a;
  return 1.0 - front * beta_fraction(b, a, 1.0 - x) / b;
}

double mean_of(const std::vector<double>& v) {
  double sum = 0.0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

double variance_of(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const double m = mean_of(v);
  double ss = 0.0;
  for (double x : v) ss += (x - m) * (x - m);
  return ss / static_cast<double>(v.size() - 1);
}

std::optional<double> number_at(const json& j) {
  return j.is_number() ? std::optional<double>(j.get<double>()) : std::nullopt;
}

std::string mib_text(double v) { return format_mib(v); }
std::string rate_text(double v) { return fixed(v, v < 100 ? 2 : 0); }
std::string quality_text(double v) { return fixed(v, 4); }
std::string count_text(double v) { return fixed(v, 0); }

std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<double> evaluation_values(const json& summary) {
  std::vector<double> out;
  if (const json& e = member(summary, "evaluations"); e.is_array())
    for (const json& point : e) out.push_back(member(point, "value").is_number() ? point["value"].get<double>() : NAN);
  return out;
}

// The repeated arms' metric `key`: its values, or none when the arm has fewer than two.
std::vector<double> metric_values(const ArmResults& arm, const std::string& key) {
  std::vector<double> out;
  const json& values = member(member(member(member(arm.summary, "repeats"), "metrics"), key.c_str()), "values");
  if (values.is_array())
    for (const json& v : values)
      if (v.is_number()) out.push_back(v.get<double>());
  return out;
}

// "mean ± half-width", "mean (identical)" or, with one value, just it; "—" for none.
std::string interval_cell(const json& stats, const RepeatMetric& m, bool quality_identical) {
  if (!stats.is_object() || trainers::integer(stats, "n") == 0) return "—";
  const double mean = trainers::number(stats, "mean"), hw = trainers::number(stats, "half_width");
  const int64_t n = trainers::integer(stats, "n");
  if (n < 2) return m.format(mean) + " (n 1)";
  if (quality_identical || hw == 0.0) return m.format(mean) + " (identical)";
  return m.format(mean) + " ± " + m.format(hw);
}

bool is_quality_metric(const std::string& key) {
  return key == "final_quality" || key == "best_quality" || key == "samples_to_target";
}

}  // namespace

double student_t_cdf(double t, double df) {
  if (!(df > 0)) throw std::invalid_argument("student_t_cdf: degrees of freedom must be > 0");
  const double tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
  return t >= 0 ? 1.0 - tail : tail;
}

double student_t_quantile(double p, double df) {
  if (!(p > 0.0 && p < 1.0)) throw std::invalid_argument("student_t_quantile: p must be in (0, 1)");
  if (p < 0.5) return -student_t_quantile(1.0 - p, df);
  double lo = 0.0, hi = 1.0;
  while (student_t_cdf(hi, df) < p) hi *= 2.0;
  for (int i = 0; i < 200 && hi - lo > 1e-15 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

Interval mean_interval(const std::vector<double>& values, double confidence) {
  Interval out;
  out.n = static_cast<int>(values.size());
  out.mean = mean_of(values);
  out.identical =
      values.size() >= 2 && std::all_of(values.begin(), values.end(), [&](double v) { return v == values.front(); });
  // Identical values have no spread; a mean summed in floating point can be a bit off them.
  if (out.identical) out.mean = values.front();
  if (values.size() < 2 || out.identical) return out;
  const double t = student_t_quantile(1.0 - (1.0 - confidence) / 2.0, static_cast<double>(values.size() - 1));
  out.half_width = t * std::sqrt(variance_of(values) / static_cast<double>(values.size()));
  return out;
}

WelchTest welch_test(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() < 2 || b.size() < 2) throw std::invalid_argument("welch_test: needs two values or more on each side");
  const double va = variance_of(a) / static_cast<double>(a.size());
  const double vb = variance_of(b) / static_cast<double>(b.size());
  const double diff = mean_of(a) - mean_of(b);
  WelchTest w;
  if (va + vb == 0.0) {
    w.p = diff == 0.0 ? 1.0 : 0.0;
    w.t = diff == 0.0 ? 0.0 : std::copysign(std::numeric_limits<double>::infinity(), diff);
    return w;
  }
  w.t = diff / std::sqrt(va + vb);
  w.df = (va + vb) * (va + vb) /
         (va * va / static_cast<double>(a.size() - 1) + vb * vb / static_cast<double>(b.size() - 1));
  w.p = 2.0 * (1.0 - student_t_cdf(std::abs(w.t), w.df));
  return w;
}

uint64_t repeat_seed(uint64_t seed, int k) { return seed + static_cast<uint64_t>(k - 1); }

std::filesystem::path repeat_dir(const std::filesystem::path& run_dir, int k) {
  return k <= 1 ? run_dir : run_dir / "repeats" / std::to_string(k);
}

const std::vector<RepeatMetric>& repeat_metrics() {
  static const std::vector<RepeatMetric> metrics{
      {"samples_per_second", "samples/s", [](const json& s) { return number_at(member(s, "samples_per_second")); },
       rate_text},
      {"peak_tracked_bytes", "peak tracked",
       [](const json& s) { return number_at(member(member(s, "memory_peak_bytes"), "total")); }, mib_text},
      {"peak_rss_bytes", "peak RSS",
       [](const json& s) { return number_at(member(member(s, "memory_peak_bytes"), "rss")); }, mib_text},
      {"bytes_per_process_per_epoch", "bytes/process/epoch",
       [](const json& s) { return number_at(member(member(s, "bytes"), "per_process_per_epoch")); }, format_bytes},
      {"final_quality", "final quality", [](const json& s) { return number_at(member(s, "final_quality")); },
       quality_text},
      {"best_quality", "best quality",
       [](const json& s) {
         const std::vector<double> v = evaluation_values(s);
         if (v.empty()) return std::optional<double>();
         const bool up = workloads::higher_is_better(trainers::text(s, "metric"));
         return std::optional<double>(up ? *std::max_element(v.begin(), v.end()) : *std::min_element(v.begin(), v.end()));
       },
       quality_text},
      {"time_to_target", "time to target",
       [](const json& s) { return number_at(member(member(s, "to_target"), "wall_seconds")); }, format_seconds},
      {"samples_to_target", "samples to target",
       [](const json& s) { return number_at(member(member(s, "to_target"), "samples")); }, count_text},
  };
  return metrics;
}

std::optional<Interval> repeat_interval(const ArmResults& arm, const std::string& key) {
  const std::vector<double> values = metric_values(arm, key);
  if (values.empty()) return std::nullopt;
  return mean_interval(values);
}

std::string interval_text(const Interval& interval, std::string (*format)(double)) {
  const std::string mean = format(interval.mean), n = std::to_string(interval.n);
  if (interval.n < 2) return mean + " (n = " + n + ")";
  if (interval.identical) return mean + " (identical in all " + n + " repeats)";
  return mean + " ± " + format(interval.half_width) + " (n = " + n + ")";
}

std::vector<CurvePoint> repeat_curve(const ArmResults& arm) {
  if (arm.repeat_evaluations.empty()) return {};
  std::vector<std::vector<EvalPoint>> repeats{eval_points(arm)};
  repeats.insert(repeats.end(), arm.repeat_evaluations.begin(), arm.repeat_evaluations.end());
  size_t points = repeats.front().size();
  for (const auto& r : repeats) points = std::min(points, r.size());
  std::vector<CurvePoint> out(points);
  for (size_t i = 0; i < points; ++i) {
    std::vector<double> samples, wall, values;
    for (const auto& r : repeats) {
      samples.push_back(static_cast<double>(r[i].samples));
      wall.push_back(r[i].wall);
      values.push_back(r[i].value);
    }
    out[i] = {mean_of(samples), mean_of(wall), mean_interval(values)};
  }
  return out;
}

bool identical_repeats(const std::vector<json>& summaries, const std::vector<std::filesystem::path>& final_weights) {
  if (summaries.size() < 2) return false;
  const std::vector<double> first = evaluation_values(summaries.front());
  for (const json& s : summaries)
    if (evaluation_values(s) != first) return false;
  std::error_code ec;
  const bool all_weights = final_weights.size() == summaries.size() &&
                           std::all_of(final_weights.begin(), final_weights.end(),
                                       [&](const auto& p) { return std::filesystem::exists(p, ec); });
  if (all_weights) {
    const std::string bytes = file_bytes(final_weights.front());
    for (const auto& p : final_weights)
      if (file_bytes(p) != bytes) return false;
  }
  return !first.empty() || all_weights;
}

json repeat_statistics(const std::vector<json>& summaries, const std::vector<uint64_t>& seeds, bool identical) {
  json statuses = json::array();
  for (const json& s : summaries) statuses.push_back(trainers::text(s, "status", "finished"));
  json metrics = json::object();
  for (const RepeatMetric& m : repeat_metrics()) {
    std::vector<double> values;
    for (const json& s : summaries)
      if (const std::optional<double> v = m.read(s)) values.push_back(*v);
    const Interval i = mean_interval(values);
    metrics[m.key] = {{"n", i.n}, {"mean", i.mean}, {"half_width", i.half_width}, {"values", values}};
  }
  return {{"n", summaries.size()}, {"seeds", seeds}, {"statuses", statuses}, {"identical", identical},
          {"metrics", metrics}};
}

Table repeats_table(const std::vector<ArmResults>& arms) {
  Table t{{"arm", "repeats"}, {false, true}, {}};
  for (const RepeatMetric& m : repeat_metrics()) {
    t.headers.push_back(m.label);
    t.right.push_back(true);
  }
  for (const ArmResults& a : arms) {
    const json& r = member(a.summary, "repeats");
    if (!r.is_object()) continue;
    const bool identical = member(r, "identical").is_boolean() && r["identical"].get<bool>();
    std::vector<std::string> row{a.name, std::to_string(trainers::integer(r, "n"))};
    for (const RepeatMetric& m : repeat_metrics())
      row.push_back(
          interval_cell(member(member(r, "metrics"), m.key.c_str()), m, identical && is_quality_metric(m.key)));
    t.rows.push_back(std::move(row));
  }
  return t;
}

std::string repeats_table_note() {
  return "Each arm ran once per repeat, one run after another, repeat k with seed + k - 1 (repeat 1 is the table "
         "above). Cells: mean ± half-width of the 95 % Student-t interval over the repeats that ran to their end "
         "(t quantile with n - 1 degrees of freedom times the standard error); \"identical\": the same value in "
         "every repeat, so no interval (for quality: every repeat gave the same evaluations and final weights, so "
         "the seed does not change this arm); "
         "\"(n 1)\": one repeat only, no interval. To target: over the repeats that reached it.";
}

Table significance_table(const std::vector<ArmResults>& arms) {
  Table t{{"arms", "metric", "mean A", "mean B", "A - B", "Welch t", "df", "p", "significant at 5 %"},
          {false, false, true, true, true, true, true, true, false},
          {}};
  for (size_t i = 0; i < arms.size(); ++i)
    for (size_t j = i + 1; j < arms.size(); ++j)
      for (const RepeatMetric& m : repeat_metrics()) {
        const std::vector<double> a = metric_values(arms[i], m.key), b = metric_values(arms[j], m.key);
        if (a.size() < 2 || b.size() < 2) continue;
        const WelchTest w = welch_test(a, b);
        const double ma = mean_of(a), mb = mean_of(b);
        std::string diff = ma < mb ? "-" : "";
        diff += m.format(std::abs(ma - mb));
        t.rows.push_back({arms[i].name + " vs " + arms[j].name, m.label, m.format(ma), m.format(mb), diff,
                          std::isfinite(w.t) ? fixed(w.t, 2) : "∞", w.df > 0 ? fixed(w.df, 1) : "—",
                          w.p < 0.001 ? "< 0.001" : fixed(w.p, 3),
                          w.df > 0 ? (w.significant() ? "yes" : "no")
                                   : (w.significant() ? "yes (no spread)" : "no (no spread)")});
      }
  return t;
}

std::string repeats_markdown(const std::vector<ArmResults>& arms) {
  const Table stats = repeats_table(arms);
  if (stats.rows.empty()) return "";
  std::string md = "### Over repeats (mean ± 95 % interval)\n\n";
  md.append(to_markdown(stats)).append("\n").append(repeats_table_note()).append("\n");
  const Table sig = significance_table(arms);
  if (sig.rows.empty()) return md;
  md.append("\n").append(to_markdown(sig)).append("\n");
  md.append("Significance: Welch's two-sided t-test (unequal variances, Welch–Satterthwaite degrees of freedom) of "
            "the arms' means over their repeats; a difference is significant when p < 0.05. Where neither arm varies "
            "over its repeats the test is undefined: \"no spread\" says the means differ in every repeat (yes) or "
            "are equal (no).\n");
  return md;
}

namespace {

// One bar chart: `bars` are (arm, interval) pairs with n >= 1.
std::string bar_chart_svg(const std::string& title, const std::vector<std::pair<std::string, Interval>>& bars,
                          std::string (*format)(double)) {
  constexpr double kLeft = 20, kTop = 40, kPlot = 220, kBar = 60, kGap = 40, kBottom = 40;
  double top = 0.0;
  for (const auto& [arm, i] : bars) top = std::max(top, i.mean + i.half_width);
  if (!(top > 0.0)) top = 1.0;
  const double width = std::max(320.0, kLeft * 2 + static_cast<double>(bars.size()) * (kBar + kGap));
  const double height = kTop + kPlot + kBottom;
  auto y = [&](double v) { return kTop + kPlot * (1.0 - std::clamp(v / (top * 1.1), 0.0, 1.0)); };
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << fixed(width, 0) << "\" height=\""
      << fixed(height, 0) << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << fixed(kLeft, 0) << "\" y=\"20\" font-size=\"13\">" << escape_xml(title) << "</text>\n";
  for (size_t b = 0; b < bars.size(); ++b) {
    const auto& [arm, i] = bars[b];
    const double x = kLeft + kGap / 2 + static_cast<double>(b) * (kBar + kGap), mid = x + kBar / 2;
    svg << "<rect x=\"" << fixed(x, 1) << "\" y=\"" << fixed(y(i.mean), 1) << "\" width=\"" << fixed(kBar, 0)
        << "\" height=\"" << fixed(kTop + kPlot - y(i.mean), 1) << "\" fill=\"#4e79a7\"><title>"
        << escape_xml(arm + ": " + format(i.mean) + " ± " + format(i.half_width) + " (n " + std::to_string(i.n) + ")")
        << "</title></rect>\n";
    const double low = y(i.mean - i.half_width), high = y(i.mean + i.half_width);
    if (i.half_width > 0.0)  // the stem and its two caps
      for (const auto& [x1, y1, x2, y2] : {std::array<double, 4>{mid, low, mid, high},
                                          {mid - 8, low, mid + 8, low},
                                          {mid - 8, high, mid + 8, high}})
        svg << "<line x1=\"" << fixed(x1, 1) << "\" y1=\"" << fixed(y1, 1) << "\" x2=\"" << fixed(x2, 1)
            << "\" y2=\"" << fixed(y2, 1) << "\" stroke=\"black\" stroke-width=\"1.5\"/>\n";
    svg << "<text x=\"" << fixed(mid, 1) << "\" y=\"" << fixed(kTop + kPlot + 16, 1) << "\" text-anchor=\"middle\">"
        << escape_xml(arm) << "</text>\n<text x=\"" << fixed(mid, 1) << "\" y=\"" << fixed(kTop + kPlot + 30, 1)
        << "\" text-anchor=\"middle\" fill=\"#555\">" << escape_xml(format(i.mean)) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace

std::vector<RepeatChart> repeat_charts(const std::vector<ArmResults>& arms) {
  std::vector<RepeatChart> out;
  for (const RepeatMetric& m : repeat_metrics()) {
    if (m.key != "samples_per_second" && m.key != "final_quality") continue;
    std::vector<std::pair<std::string, Interval>> bars;
    for (const ArmResults& a : arms)
      if (const std::optional<Interval> i = repeat_interval(a, m.key)) bars.emplace_back(a.name, *i);
    if (bars.empty()) continue;
    const std::string title = m.label + " over repeats";
    out.push_back({{"repeats-" + m.key + ".svg", title,
                    "Each arm's mean " + m.label + " over its repeats; the error bar spans its 95 % Student-t "
                    "interval (none: identical repeats or one repeat)."},
                   bar_chart_svg(title, bars, m.format)});
  }
  return out;
}

}  // namespace quartet::analysis

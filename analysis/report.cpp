#include "analysis/report.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "analysis/pipeline_view.h"
#include "analysis/projection.h"
#include "analysis/repeats.h"
#include "analysis/summary.h"
#include "trainers/records.h"
#include "workloads/workload.h"

namespace quartet::analysis {

using nlohmann::json;
using trainers::integer;
using trainers::member;
using trainers::number;
using trainers::text;

namespace {

std::string mib(double bytes) { return fixed(bytes / 1048576.0, 1); }

// Whole samples per second, with two decimals below 100 (a 3D volume arm trains a few
// samples a second, and "2" would hide a 13 % difference between 2.00 and 2.27).
std::string rate(double samples_per_second) { return fixed(samples_per_second, samples_per_second < 100 ? 2 : 0); }

// Seconds to three significant figures, so a 20 ms epoch and a 20 min epoch both read.
std::string seconds(double v) {
  if (v >= 100.0) return fixed(v, 0);
  if (v >= 10.0) return fixed(v, 1);
  if (v >= 1.0) return fixed(v, 2);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// Tracked peak (key "total") or RSS (key "rss"), MiB: one figure, or each kind of
// process's largest when an arm has several (a federated server and its pools:
// "pool 5.8 · server 95.1").
std::string memory_cell(const ArmResults& arm, const char* key) {
  const json& mem = member(arm.summary, "memory_peak_bytes");
  const json& by_role = member(mem, "by_role");
  std::vector<std::pair<std::string, double>> kinds;
  if (by_role.is_object())
    for (const auto& [role, m] : by_role.items()) {
      const std::string kind = role_kind(role);
      const double v = number(m, key);
      auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == kind; });
      if (it == kinds.end()) kinds.emplace_back(kind, v);
      else it->second = std::max(it->second, v);
    }
  if (kinds.size() >= 2) {
    std::string cell;
    for (const auto& [kind, v] : kinds) cell += (cell.empty() ? "" : " · ") + kind + " " + mib(v);
    return cell;
  }
  if (member(mem, key).is_number()) return mib(number(mem, key));
  // A running or failed arm: the records' figures.
  double best = 0.0;
  for (const ProcessMemory& p : process_memory(arm)) {
    double v = 0.0;
    if (std::string(key) == "rss") v = p.rss;
    else
      for (const auto& [tag, bytes] : p.tags) v += bytes;
    best = std::max(best, v);
  }
  return best > 0 ? mib(best) : "—";
}

// The activations' tracked peak, MiB: the summary's, or the records' largest process's.
std::string activations_cell(const ArmResults& arm) {
  const json& by_tag = member(member(arm.summary, "memory_peak_bytes"), "by_tag");
  if (by_tag.is_object()) return mib(number(by_tag, "activations"));
  double best = -1.0;
  for (const ProcessMemory& p : process_memory(arm))
    for (const auto& [tag, bytes] : p.tags)
      if (tag == "activations") best = std::max(best, bytes);
  return best >= 0 ? mib(best) : "—";
}

std::string to_target_cell(const ArmResults& arm) {
  const json& t = member(arm.summary, "to_target");
  if (t.is_object()) {
    std::string cell = format_seconds(number(t, "wall_seconds")) + ", " + std::to_string(integer(t, "samples"));
    if (member(t, "rounds").is_number()) cell += ", round " + std::to_string(integer(t, "rounds"));
    return cell;
  }
  return member(arm.summary, "target").is_number() ? "not reached" : "—";
}

}  // namespace

ReportFormats parse_formats(const std::string& list) {
  ReportFormats f;
  std::stringstream in(list);
  bool any = false;
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(std::remove_if(item.begin(), item.end(), [](unsigned char c) { return std::isspace(c); }), item.end());
    if (item.empty()) continue;
    any = true;
    if (item == "png") f.png = true;
    else if (item == "svg") f.svg = true;
    else if (item == "md") f.md = true;
    else if (item == "html") f.html = true;
    else throw std::invalid_argument("--format: unknown format \"" + item + "\"; known: png, svg, md, html");
  }
  if (!any) throw std::invalid_argument("--format: give one or more of png, svg, md, html");
  if (f.html && !f.png && !f.svg) f.png = true;
  return f;
}

bool needs_charts(const ReportFormats& f) { return f.png || f.svg || f.html; }

// The best evaluation (the lowest of a lower-is-better metric) and where it came:
// "0.8842 (epoch 2.0)".
std::string best_quality_cell(const std::vector<EvalPoint>& evals, const std::string& metric) {
  const bool up = workloads::higher_is_better(metric);
  const auto best = std::max_element(evals.begin(), evals.end(), [up](const EvalPoint& a, const EvalPoint& b) {
    return up ? a.value < b.value : a.value > b.value;
  });
  return fixed(best->value, 4) + " (epoch " + fixed(best->epoch, 1) + ")";
}

Table arms_table(const std::vector<ArmResults>& arms) {
  Table t{{"arm", "regime", "status", "samples/s", "peak tracked MiB", "peak RSS MiB", "activations MiB",
           "bytes/process/epoch", "train time", "final quality", "best quality", "to target"},
          {false, false, false, true, true, true, true, true, true, true, true, false},
          {}};
  for (const ArmResults& a : arms) {
    const std::vector<EvalPoint> evals = eval_points(a);
    std::vector<std::string> row{a.name, a.regime, a.status == "degraded" ? status_text(a.summary) : a.status};
    // An arm that trained no sample (cut short before its first step, or never started)
    // has no figures: "—", not zeros.
    if (samples_done(a) > 0)
      row.insert(row.end(), {rate(samples_per_second(a)), memory_cell(a, "total"), memory_cell(a, "rss"),
                             activations_cell(a), format_bytes(bytes_per_process_per_epoch(a)),
                             format_seconds(train_seconds(a))});
    else
      row.resize(row.size() + 6, "—");  // not started
    row.push_back(evals.empty() ? "—" : fixed(evals.back().value, 4));
    row.push_back(evals.empty() ? "—" : best_quality_cell(evals, eval_metric(a)));
    row.push_back(to_target_cell(a));
    t.rows.push_back(std::move(row));
  }
  return t;
}

std::string arms_table_text(const std::vector<ArmResults>& arms, int columns) {
  Table t = arms_table(arms);
  t.headers = {"arm", "regime", "status", "samples/s", "tracked MiB", "RSS MiB", "activ. MiB", "bytes/proc/epoch",
               "train time", "final quality", "best quality", "to target"};
  std::vector<std::string> left_out;
  std::string out = text_table(t, columns, {6, 5, 10, 1, 11, 4, 7, 8}, &left_out);
  if (!left_out.empty()) {
    // A line naming the columns left out, wrapped at the width.
    std::string line = "Left out to fit " + std::to_string(columns) + " columns (summary.md has them):";
    for (size_t i = 0; i < left_out.size(); ++i) {
      const std::string word = " " + left_out[i] + (i + 1 < left_out.size() ? "," : ".");
      if (display_width(line) + display_width(word) > columns) {
        out += line + "\n";
        line = " ";
      }
      line += word;
    }
    out += line + "\n";
  }
  return out;
}

std::string arms_table_note() {
  return "samples/s: training samples per second of training time (evaluation, and kernel choices the machine had not measured before, excluded). Memory: the engine's "
         "tracked peak (all tags, training only) and the process's peak resident set, the largest process's; "
         "an arm with several kinds of process (federated: server and pools) shows each kind's. Quality: the "
         "workload's test-set metric (accuracy; mean Dice for volumes; bits per character for text, where lower is "
         "better) at the last evaluation, and the best one with the epoch it came at. To target: time and training "
         "samples to the first evaluation at or above the target (at or below it for bits per character; "
         "federated: and its round).";
}

Table projection_table(const std::vector<ArmResults>& arms) {
  Table t{{"arm", "critical path", "compute s/epoch", "bytes/epoch on the path", "messages/epoch",
           "intra-host bytes/epoch (link)", "measured s/epoch (link)", "projected s/epoch on that link"},
          {false, false, true, true, true, true, true, true},
          {}};
  for (const std::string& l : projection_links()) {
    t.headers.push_back("projected: " + l);
    t.right.push_back(true);
  }
  for (const ArmResults& a : arms) {
    const ArmProjection p = project_arm(a);
    std::vector<std::string> row{p.arm};
    if (!p.unavailable.empty()) {
      row.push_back(p.unavailable);
      row.resize(t.headers.size(), "—");
      t.rows.push_back(row);
      continue;
    }
    row.push_back(p.path_model);
    row.push_back(seconds(p.compute_seconds_per_epoch));
    row.push_back(format_bytes(p.bytes_per_epoch));
    row.push_back(fixed(p.messages_per_epoch, 0));
    row.push_back(p.intra_link.empty() ? "—" : format_bytes(p.intra_bytes_per_epoch) + " (" + p.intra_link + ")");
    row.push_back(seconds(p.measured_seconds_per_epoch) + " (" + p.measured_link + ")");
    row.push_back(p.on_measured_link ? seconds(p.on_measured_link->seconds_per_epoch) : "—");
    for (const LinkEstimate& e : p.links) row.push_back(seconds(e.seconds_per_epoch));
    t.rows.push_back(row);
  }
  return t;
}

std::string environment_line(const RunResults& run) {
  const json& env = run.environment;
  std::ostringstream out;
  out << "CPU " << text(env, "cpu", "?") << ", " << integer(env, "cores") << " cores; " << text(env, "build_type", "?")
      << " build of " << text(env, "quartet_commit", "?") << " (" << text(env, "compiler", "?") << "); "
      << text(env, "os", "?");
  return out.str();
}

std::vector<std::string> problems(const RunResults& run) {
  std::vector<std::string> out = run.warnings;
  for (const ArmResults& a : run.arms)
    if (!a.error.empty()) out.push_back(a.name + " failed: " + a.error);
  return out;
}

Table privacy_table(const std::vector<ArmResults>& arms) {
  Table t{{"arm", "clip S", "noise z", "sampling rate q", "rounds", "epsilon", "delta", "final quality"},
          {false, true, true, true, true, true, true, true},
          {}};
  for (const ArmResults& a : arms) {
    const json& p = member(a.summary, "privacy");
    if (!p.is_object()) continue;
    const json& eps = member(p, "epsilon");
    const std::vector<EvalPoint> evals = eval_points(a);
    char delta[32];
    std::snprintf(delta, sizeof delta, "%g", number(p, "delta"));
    t.rows.push_back({a.name, fixed(number(p, "clip"), 3), fixed(number(p, "noise_multiplier"), 2),
                      fixed(number(p, "sampling_rate"), 3), std::to_string(integer(p, "rounds")),
                      eps.is_number() ? fixed(eps.get<double>(), 2) : "∞ (no noise)", delta,
                      evals.empty() ? "—" : fixed(evals.back().value, 4)});
  }
  return t;
}

std::string privacy_table_note() {
  return "Client-level (epsilon, delta)-DP of the released global weights after all rounds (DP-FedAvg, RDP "
         "accountant for the sampled Gaussian mechanism; docs/federated.md).";
}

std::string summary_markdown(const RunResults& run) {
  std::string md = to_markdown(arms_table(run.arms)) + "\n" + arms_table_note() + "\n";
  const Table privacy = privacy_table(run.arms);
  if (!privacy.rows.empty())
    md.append("\n").append(to_markdown(privacy)).append("\n").append(privacy_table_note()).append("\n");
  if (const std::string repeats = repeats_markdown(run.arms); !repeats.empty()) md.append("\n").append(repeats);
  return md;
}

std::string projection_markdown(const RunResults& run) {
  std::ostringstream out;
  out << "Assumptions:\n\n";
  for (const std::string& a : projection_assumptions()) out << "- " << a << "\n";
  out << "\n" << to_markdown(projection_table(run.arms));
  return out.str();
}

std::string pipeline_markdown(const RunResults& run) {
  std::ostringstream md;
  for (const ArmResults& a : run.arms) {
    const std::vector<StageFigures> stages = pipeline_stages(a);
    if (stages.empty()) continue;
    md << "### " << a.name << "\n\n" << stages.size() << " stages, " << stages.front().micro_batches
       << " micro-batches, " << stages.front().schedule << "; balance (busiest / least busy stage's compute) "
       << fixed(stage_balance(stages), 2) << ".\n\n"
       << to_markdown(pipeline_table(stages)) << "\n";
    if (!pipeline_timeline(a).empty())
      md << "![" << a.name << ": one step](" << timeline_file(a) << ")\n\nThe last step on every stage, on one "
         << "clock: forwards blue, backwards orange, the optimizer grey; the gaps are idle.\n\n";
  }
  const std::string body = md.str();
  return body.empty() ? "" : body + pipeline_table_note() + "\n";
}

std::vector<std::pair<std::string, std::string>> pipeline_timeline_images(const RunResults& run) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const ArmResults& a : run.arms) {
    const std::vector<StageTimeline> t = pipeline_timeline(a);
    if (!t.empty()) out.emplace_back(timeline_file(a), timeline_svg(t, a.name + ": the last step, stage by stage"));
  }
  return out;
}

std::string report_markdown(const RunResults& run, const std::vector<ChartImage>& charts) {
  std::ostringstream md;
  md << "# " << run.name << "\n\nRun folder `" << run.dir.filename().string() << "`, status **" << run.status
     << "**. " << environment_line(run) << ".\n\n";
  for (const std::string& p : problems(run)) md << "> " << p << "\n\n";
  md << "## Summary (measured)\n\n" << summary_markdown(run) << "\n";
  const std::string pipeline = pipeline_markdown(run);
  if (!pipeline.empty()) md << "## Pipeline stages (measured)\n\n" << pipeline << "\n";
  if (!charts.empty()) {
    md << "## Charts\n\n";
    for (const ChartImage& c : charts) md << "![" << c.title << "](" << c.file << ")\n\n" << c.caption << "\n\n";
  }
  md << "## Projection over link profiles\n\n" << projection_markdown(run);
  return md.str();
}

}  // namespace quartet::analysis

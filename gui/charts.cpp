#include "gui/charts.h"

#include <QAreaSeries>
#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QCategoryAxis>
#include <QHorizontalBarSeries>
#include <QHorizontalStackedBarSeries>
#include <QLegendMarker>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QPen>
#include <QScatterSeries>
#include <QStackedBarSeries>
#include <QValueAxis>
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "analysis/projection.h"
#include "analysis/repeats.h"
#include "analysis/tables.h"
#include "trainers/records.h"
#include "workloads/workload.h"

namespace quartet::gui {

using namespace analysis;

namespace {

using trainers::member;
using trainers::number;

using Points = QList<QPointF>;

// Removes every series and axis: bar charts are rebuilt on each fill.
void reset(QChart* chart) {
  chart->removeAllSeries();
  for (QAbstractAxis* axis : chart->axes()) {
    chart->removeAxis(axis);
    delete axis;
  }
}

QValueAxis* value_axis(const QString& title, double lo, double hi, const char* format = "%.0f") {
  auto* axis = new QValueAxis;
  axis->setTitleText(title);
  axis->setRange(lo, hi);
  axis->setLabelFormat(format);
  axis->applyNiceNumbers();
  return axis;
}

// A log axis from the decade below `lo` to the decade above `hi`.
QLogValueAxis* log_axis(const QString& title, double lo, double hi, const char* format) {
  auto* axis = new QLogValueAxis;
  axis->setTitleText(title);
  axis->setBase(10.0);
  axis->setLabelFormat(format);
  if (!(lo > 0) || !(hi > 0)) lo = 1.0, hi = 10.0;
  axis->setRange(std::pow(10.0, std::floor(std::log10(lo))), std::pow(10.0, std::ceil(std::log10(hi * 1.0001))));
  axis->setMinorTickCount(-1);
  return axis;
}

QString label_of(const ArmResults& arm) { return QString::fromStdString(analysis::shown_label(arm)); }

// A bar's category: its label, a comparison's run letter on a line of its own ("A: single"
// is "A<br>single"), so that narrow categories need not cut it.
QString category_label(const ArmResults& arm) {
  QString label = label_of(arm);
  if (const qsizetype at = label.indexOf(": "); at > 0 && at <= 3) label.replace(at, 2, "<br>");
  return label;
}

void attach(QChart* chart, QAbstractSeries* series, QAbstractAxis* x, QAbstractAxis* y) {
  chart->addSeries(series);
  if (!chart->axes(Qt::Horizontal).contains(x)) chart->addAxis(x, Qt::AlignBottom);
  if (!chart->axes(Qt::Vertical).contains(y)) chart->addAxis(y, Qt::AlignLeft);
  series->attachAxis(x);
  series->attachAxis(y);
}

void hide_from_legend(QChart* chart, QAbstractSeries* series) {
  for (QLegendMarker* m : chart->legend()->markers(series)) m->setVisible(false);
}

// Where the legend goes: under the chart while its entries fit on one line; beside it,
// one entry a line, when there are more (a legend elides what does not fit).
void place_legend(QChart* chart, size_t entries) {
  chart->legend()->setAlignment(entries > 5 ? Qt::AlignRight : Qt::AlignBottom);
}

// The legend of `entries` entries, each drawn as its series is (a run's line style shows).
void show_legend(QChart* chart, size_t entries) {
  chart->legend()->setVisible(true);
  chart->legend()->setMarkerShape(QLegend::MarkerShapeFromSeries);
  place_legend(chart, entries);
}

// The workload's metric the arms were evaluated with on the test set ("accuracy", "dice",
// "bpc"; analysis::eval_metric); "test quality" when they differ or none has been
// evaluated. Short: a small chart cuts a long axis title.
QString metric_of(const std::vector<ArmResults>& arms) {
  std::string metric;
  for (const ArmResults& a : arms)
    if (const std::string m = eval_metric(a); !m.empty()) {
      if (!metric.empty() && m != metric) return "test quality";
      metric = m;
    }
  return metric.empty() ? QString("test quality") : QString::fromStdString(metric);
}

// Line charts keep their series and axes between fills: each arm's series is found by
// name and replace()d.
struct LineSpec {
  QString x_title, y_title;
  bool log_y = false;
  double y_cap = 0.0;  // the metric's ceiling (1 for accuracy and Dice), 0: none
  const char* y_format = "%.2f";
  const char* x_format = "%.0f";
  std::function<Points(const ArmResults&)> points;
  std::function<QString(const ArmResults&)> name;  // the arm's line; empty: its label
  // The lower and upper edges of a band shaded under the arm's line (empty: none).
  std::function<std::pair<Points, Points>(const ArmResults&)> band;
};

// What an arm's error bar or band is called: "<arm> · 95 % interval".
QString error_bar_name(const QString& arm) { return arm + " · 95 % interval"; }

// The series of `chart` named `name`, of type T, or null.
template <typename T>
T* series_named(QChart* chart, const QString& name) {
  for (QAbstractSeries* s : chart->series())
    if (s->name() == name)
      if (auto* typed = qobject_cast<T*>(s)) return typed;
  return nullptr;
}

void lines(QChart* chart, const std::vector<ArmResults>& arms, const LineSpec& spec,
           const std::vector<std::pair<QString, Points>>& extra = {}) {
  QList<QAbstractAxis*> xs = chart->axes(Qt::Horizontal), ys = chart->axes(Qt::Vertical);
  QValueAxis* x = xs.isEmpty() ? nullptr : qobject_cast<QValueAxis*>(xs.front());
  QAbstractAxis* y = ys.isEmpty() ? nullptr : ys.front();
  if (!x || !y) {
    reset(chart);
    x = value_axis(spec.x_title, 0.0, 1.0, spec.x_format);
    y = spec.log_y ? static_cast<QAbstractAxis*>(log_axis(spec.y_title, 1.0, 10.0, spec.y_format))
                   : value_axis(spec.y_title, 0.0, 1.0, spec.y_format);
    chart->addAxis(x, Qt::AlignBottom);
    chart->addAxis(y, Qt::AlignLeft);
  }
  // Titles on every fill: a live chart is made before the first evaluation says the metric.
  x->setTitleText(spec.x_title);
  y->setTitleText(spec.y_title);
  double x_hi = 0.0, y_lo = std::numeric_limits<double>::infinity(), y_hi = 0.0;
  QStringList wanted;
  // An arm's line, or (extra) a reference line: grey, thin, dashed, no points.
  auto place = [&](const QString& name, Points pts, const QColor& color, Qt::PenStyle style, bool extra) {
    if (spec.log_y) pts.erase(std::remove_if(pts.begin(), pts.end(), [](const QPointF& p) { return !(p.y() > 0); }), pts.end());
    if (pts.isEmpty()) return;
    wanted << name;
    QLineSeries* s = series_named<QLineSeries>(chart, name);
    if (!s) {
      s = new QLineSeries;
      s->setName(name);
      attach(chart, s, x, y);
    }
    // Set on every fill: a comparison that gains or loses a run may recolour an arm.
    QPen pen(color);
    pen.setWidthF(extra ? 1.5 : 2.0);
    pen.setStyle(style);
    s->setPen(pen);
    s->setPointsVisible(!extra && pts.size() <= 60);
    s->replace(pts);
    for (const QPointF& p : pts) {
      x_hi = std::max(x_hi, p.x());
      y_lo = std::min(y_lo, p.y());
      y_hi = std::max(y_hi, p.y());
    }
  };
  // A translucent band in the arm's colour, left out of the legend (its line is there).
  auto place_band = [&](const QString& name, const Points& lower, const Points& upper, QColor color) {
    if (lower.isEmpty() || lower.size() != upper.size()) return;
    wanted << name;
    QAreaSeries* band = series_named<QAreaSeries>(chart, name);
    if (!band) {
      band = new QAreaSeries(new QLineSeries, new QLineSeries);
      band->setName(name);
      attach(chart, band, x, y);
      hide_from_legend(chart, band);
    }
    Points top = upper;  // an interval may reach past the metric's ceiling; the axis stops there
    if (spec.y_cap > 0)
      for (QPointF& p : top) p.setY(std::min(p.y(), spec.y_cap));
    band->lowerSeries()->replace(lower);
    band->upperSeries()->replace(top);
    band->setPen(Qt::NoPen);
    color.setAlpha(45);
    band->setBrush(color);
    for (const QPointF& p : lower) y_lo = std::min(y_lo, p.y());
    for (const QPointF& p : top) y_hi = std::max(y_hi, p.y());
  };
  const std::vector<QColor> colors = arm_colors(arms);
  for (size_t i = 0; i < arms.size(); ++i) {
    const QString name = spec.name ? spec.name(arms[i]) : label_of(arms[i]);
    place(name, spec.points(arms[i]), colors[i], run_pen_style(arms[i].run), false);
    if (spec.band) {
      const auto [lower, upper] = spec.band(arms[i]);
      place_band(error_bar_name(name), lower, upper, colors[i]);
    }
  }
  for (const auto& [name, pts] : extra) place(name, pts, QColor(120, 120, 120), Qt::DashLine, true);
  for (QAbstractSeries* s : chart->series())
    if (!wanted.contains(s->name())) {
      chart->removeSeries(s);
      delete s;
    }
  x->setRange(0.0, x_hi > 0 ? x_hi * 1.03 : 1.0);
  x->applyNiceNumbers();
  x->setLabelFormat(x->max() <= 0.1 ? "%.3f" : x->max() <= 1.0 ? "%.2f" : x->max() <= 10.0 ? "%.1f" : "%.0f");
  if (!std::isfinite(y_lo)) y_lo = 0.0, y_hi = 1.0;
  if (auto* ly = qobject_cast<QLogValueAxis*>(y)) {
    if (y_lo > 0) {
      ly->setRange(std::pow(10.0, std::floor(std::log10(y_lo))), std::pow(10.0, std::ceil(std::log10(y_hi * 1.0001))));
    }
  } else if (auto* vy = qobject_cast<QValueAxis*>(y)) {
    const double pad = std::max(0.02, (y_hi - y_lo) * 0.08);
    double top = y_hi + pad;
    if (spec.y_cap > 0 && y_hi <= spec.y_cap) top = std::min(top, spec.y_cap);
    vy->setRange(std::max(0.0, y_lo - pad), top);
    vy->applyNiceNumbers();
    if (spec.y_cap > 0 && vy->max() > spec.y_cap && y_hi <= spec.y_cap) vy->setMax(spec.y_cap);
  }
  int legend_entries = 0;
  for (QAbstractSeries* s : chart->series())
    if (!qobject_cast<QAreaSeries*>(s)) ++legend_entries;
  show_legend(chart, static_cast<size_t>(legend_entries));
}

// The dashed target line of a quality chart, when the arms share one.
std::vector<std::pair<QString, Points>> target_line(const std::vector<ArmResults>& arms, bool by_samples) {
  double target = 0.0, x_hi = 0.0;
  for (const ArmResults& a : arms) {
    const double t = number(a.summary, "target", number(member(a.spec, "train"), "target"));
    if (t > 0 && target > 0 && t != target) return {};  // runs with different targets: no one line
    if (t > 0) target = t;
    for (const EvalPoint& e : eval_points(a)) x_hi = std::max(x_hi, by_samples ? static_cast<double>(e.samples) : e.wall);
  }
  if (!(target > 0) || !(x_hi > 0)) return {};
  return {{QString("target %1").arg(target), Points{{0.0, target}, {x_hi, target}}}};
}

// The chart's title, saying what its figures are when some arm has repeats.
void title_repeats(QChart* chart, ChartKind kind, bool repeated, const char* what) {
  chart->setTitle(QString::fromUtf8(chart_info(kind).title) + (repeated ? QString(" · ") + what : QString()));
}

// Whether every evaluation of every repeat of the arm was the same: its band would have no width.
bool identical_curve(const std::vector<CurvePoint>& curve) {
  return std::all_of(curve.begin(), curve.end(), [](const CurvePoint& p) { return p.value.identical; });
}

// An arm with repeats is drawn as its mean curve over them, in a band over each
// evaluation's 95 % interval, and named so ("single · mean of 3", or "identical" when its
// repeats gave the same evaluations); an arm without, as its one curve.
void quality(QChart* chart, const std::vector<ArmResults>& arms, bool by_samples) {
  LineSpec spec;
  spec.x_title = by_samples ? "training samples" : "wall time (s)";
  spec.y_title = metric_of(arms);
  // The higher-is-better metrics (accuracy, Dice) end at 1; bits per character have no ceiling.
  spec.y_cap = workloads::higher_is_better(spec.y_title.toStdString()) ? 1.0 : 0.0;
  auto x_of = [by_samples](double samples, double wall) { return by_samples ? samples : wall; };
  spec.points = [x_of](const ArmResults& a) {
    Points pts;
    if (const std::vector<CurvePoint> curve = repeat_curve(a); !curve.empty()) {
      for (const CurvePoint& p : curve) pts.append({x_of(p.samples, p.wall), p.value.mean});
      return pts;
    }
    for (const EvalPoint& e : eval_points(a)) pts.append({x_of(static_cast<double>(e.samples), e.wall), e.value});
    return pts;
  };
  spec.name = [](const ArmResults& a) -> QString {
    const std::vector<CurvePoint> curve = repeat_curve(a);
    if (curve.empty()) return label_of(a);
    const QString n = QString::number(curve.front().value.n);
    return label_of(a) + (identical_curve(curve) ? QString(" · %1 identical repeats").arg(n) : QString(" · mean of %1").arg(n));
  };
  spec.band = [x_of](const ArmResults& a) {
    std::pair<Points, Points> band;
    const std::vector<CurvePoint> curve = repeat_curve(a);
    if (identical_curve(curve)) return band;
    for (const CurvePoint& p : curve) {
      band.first.append({x_of(p.samples, p.wall), p.value.mean - p.value.half_width});
      band.second.append({x_of(p.samples, p.wall), p.value.mean + p.value.half_width});
    }
    return band;
  };
  lines(chart, arms, spec, target_line(arms, by_samples));
  title_repeats(chart, by_samples ? ChartKind::quality_samples : ChartKind::quality_wall,
                std::any_of(arms.begin(), arms.end(), [](const ArmResults& a) { return !a.repeat_evaluations.empty(); }),
                "mean over repeats, 95 % band");
}

// Training loss from the first step on: what a live run shows before its first evaluation.
void loss(QChart* chart, const std::vector<ArmResults>& arms) {
  LineSpec spec;
  spec.x_title = "training samples";
  spec.y_title = "loss";  // short: the title says training
  spec.y_format = "%.3g";
  spec.points = [](const ArmResults& a) {
    Points pts;
    for (const auto& [samples, value] : loss_points(a)) pts.append({static_cast<double>(samples), value});
    return pts;
  };
  lines(chart, arms, spec);
}

// A bar chart's content: categories along x, one bar set per series of values.
struct Bars {
  QStringList categories;
  std::vector<QString> sets;
  std::vector<QColor> colors;
  std::vector<Qt::BrushStyle> patterns;     // per set; empty: solid
  std::vector<std::vector<double>> values;  // per set, per category
  // Per category (vertical bars only): an error bar over the interval around its bar's
  // value, the mean, named for its arm; none without repeats, or without width.
  struct ErrorBar {
    QString arm;
    Interval interval;
  };
  std::vector<std::optional<ErrorBar>> errors;
  bool stacked = false;
  bool horizontal = false;  // categories down the left, one per line: long lists stay legible
  bool labels = false;  // values above the bars
  QString y_title;
  bool log_y = false;
  double y_lo = 0.0, y_hi = 1.0;
  const char* y_format = "%.0f";
};

// The bars' error bars, redrawn: per interval a black line that runs cap, stem, cap
// (a category sits at x = its index on a bar category axis), left out of the legend.
void error_bars(QChart* chart, const Bars& b, QAbstractAxis* x, QAbstractAxis* y) {
  for (QAbstractSeries* s : chart->series())
    if (s->name().endsWith(error_bar_name(""))) {
      chart->removeSeries(s);
      delete s;
    }
  constexpr double kCap = 0.12;  // half a cap's width, in categories
  for (size_t c = 0; c < b.errors.size() && c < static_cast<size_t>(b.categories.size()); ++c) {
    if (!b.errors[c] || !(b.errors[c]->interval.half_width > 0)) continue;
    const Interval& i = b.errors[c]->interval;
    const double at = static_cast<double>(c), lo = std::max(i.mean - i.half_width, b.y_lo), hi = i.mean + i.half_width;
    auto* line = new QLineSeries;
    line->setName(error_bar_name(b.errors[c]->arm));
    line->append(Points{{at - kCap, hi}, {at + kCap, hi}, {at, hi}, {at, lo}, {at - kCap, lo}, {at + kCap, lo}});
    QPen pen(Qt::black);
    pen.setWidthF(1.5);
    line->setPen(pen);
    attach(chart, line, x, y);
    hide_from_legend(chart, line);
  }
}

// Refreshes a bar chart in place when its categories and sets are unchanged (so a live
// view does not rebuild its axes twice a second); otherwise rebuilds it.
void bars(QChart* chart, const Bars& b) {
  // x: the category axis, y: the value axis, whichever way the bars run.
  const Qt::Orientation category_side = b.horizontal ? Qt::Vertical : Qt::Horizontal;
  const Qt::Orientation value_side = b.horizontal ? Qt::Horizontal : Qt::Vertical;
  QAbstractBarSeries* series = nullptr;
  for (QAbstractSeries* s : chart->series())
    if (!series) series = qobject_cast<QAbstractBarSeries*>(s);
  QBarCategoryAxis* x = nullptr;
  if (!chart->axes(category_side).isEmpty()) x = qobject_cast<QBarCategoryAxis*>(chart->axes(category_side).front());
  QAbstractAxis* y = chart->axes(value_side).isEmpty() ? nullptr : chart->axes(value_side).front();
  bool same = series && x && y && x->categories() == b.categories && series->count() == static_cast<int>(b.sets.size()) &&
              (qobject_cast<QLogValueAxis*>(y) != nullptr) == b.log_y;
  for (int i = 0; same && i < series->count(); ++i) same = series->barSets()[i]->label() == b.sets[i];
  if (same) {
    for (size_t i = 0; i < b.sets.size(); ++i)
      for (int c = 0; c < b.categories.size(); ++c) series->barSets()[static_cast<int>(i)]->replace(c, b.values[i][c]);
    if (auto* ly = qobject_cast<QLogValueAxis*>(y)) {
      ly->setRange(b.y_lo, b.y_hi);
    } else if (auto* vy = qobject_cast<QValueAxis*>(y)) {
      vy->setRange(b.y_lo, b.y_hi);
      vy->applyNiceNumbers();
    }
    error_bars(chart, b, x, y);
    return;
  }
  // Rebuild the series, but keep the axes: a chart whose axes are swapped while it is
  // shown can keep drawing the old ones' labels.
  chart->removeAllSeries();
  if (y && (qobject_cast<QLogValueAxis*>(y) != nullptr) != b.log_y) {
    chart->removeAxis(y);
    delete y;
    y = nullptr;
  }
  if (!x) {
    reset(chart);
    x = new QBarCategoryAxis;
    y = nullptr;
  }
  x->setCategories(b.categories);
  // Upright labels: a slanted one is cut at its category's width all the same.
  x->setLabelsAngle(0);
  if (!y) {
    if (b.log_y) {
      auto* ly = new QLogValueAxis;
      ly->setBase(10.0);
      ly->setLabelFormat(b.y_format);
      ly->setMinorTickCount(-1);
      y = ly;
    } else {
      y = value_axis(b.y_title, b.y_lo, b.y_hi, b.y_format);
    }
    y->setTitleText(b.y_title);
  }
  if (auto* ly = qobject_cast<QLogValueAxis*>(y)) {
    ly->setRange(b.y_lo, b.y_hi);
  } else if (auto* vy = qobject_cast<QValueAxis*>(y)) {
    vy->setRange(b.y_lo, b.y_hi);
    vy->applyNiceNumbers();
  }
  QAbstractBarSeries* fresh = nullptr;
  if (b.horizontal)
    fresh = b.stacked ? static_cast<QAbstractBarSeries*>(new QHorizontalStackedBarSeries)
                      : static_cast<QAbstractBarSeries*>(new QHorizontalBarSeries);
  else
    fresh = b.stacked ? static_cast<QAbstractBarSeries*>(new QStackedBarSeries)
                      : static_cast<QAbstractBarSeries*>(new QBarSeries);
  for (size_t i = 0; i < b.sets.size(); ++i) {
    auto* set = new QBarSet(b.sets[i]);
    set->setBrush(QBrush(b.colors[i], i < b.patterns.size() ? b.patterns[i] : Qt::SolidPattern));
    set->setBorderColor(b.colors[i]);
    set->setLabelColor(Qt::black);  // the default white vanishes above a bar
    for (double v : b.values[i]) *set << v;
    fresh->append(set);
  }
  if (b.labels) {
    fresh->setLabelsVisible(true);
    fresh->setLabelsPosition(QAbstractBarSeries::LabelsOutsideEnd);
    fresh->setLabelsFormat("@value");
  }
  if (b.horizontal)
    attach(chart, fresh, y, x);
  else
    attach(chart, fresh, x, y);
  if (!b.horizontal) error_bars(chart, b, x, y);
  chart->legend()->setVisible(b.sets.size() > 1);
  chart->legend()->setMarkerShape(QLegend::MarkerShapeRectangle);
  place_legend(chart, b.sets.size());
}

// A run's bars: the first run's solid, the next ones' hatched.
Qt::BrushStyle run_pattern(int run) {
  static const Qt::BrushStyle kPatterns[] = {Qt::SolidPattern, Qt::BDiagPattern, Qt::Dense4Pattern, Qt::CrossPattern};
  return kPatterns[static_cast<size_t>(std::max(run, 0)) % 4];
}

// The figure `key` of an arm over its repeats (analysis/repeats.h), and its text under
// the bar in the report's number format, a short line each (a category is narrow, and
// the Compare list and tooltips give n): "1234/s", "± 56"; or "31.0 MB", "identical".
// None for an arm without repeats.
std::optional<Interval> over_repeats(const ArmResults& arm, const std::string& key, const QString& unit,
                                     QString& text) {
  const std::optional<Interval> i = repeat_interval(arm, key);
  if (!i) return i;
  std::string (*format)(double) = nullptr;
  for (const RepeatMetric& m : repeat_metrics())
    if (m.key == key) format = m.format;
  text = QString::fromStdString(format(i->mean)) + unit;
  if (i->identical)
    text += "<br>identical";
  else if (i->n >= 2)
    text += "<br>± " + QString::fromStdString(format(i->half_width));
  return i;
}

// One bar per arm in the arm's colour (a stacked set per arm, zero under the others'
// categories), its value in its category label; an arm with repeats at its mean, with an
// error bar over its 95 % interval.
void throughput(QChart* chart, const std::vector<ArmResults>& arms) {
  Bars b;
  b.stacked = true;
  b.y_title = "samples/s";
  const std::vector<QColor> colors = arm_colors(arms);
  double top = 1.0;
  for (size_t i = 0; i < arms.size(); ++i) {
    QString text;
    const std::optional<Interval> interval = over_repeats(arms[i], "samples_per_second", "/s", text);
    const double v = interval ? interval->mean : std::round(samples_per_second(arms[i]));
    if (text.isEmpty() && v > 0) text = QString::number(v, 'f', 0) + "/s";
    b.categories << category_label(arms[i]) + (text.isEmpty() ? QString() : "<br>" + text);
    b.errors.push_back(interval ? std::optional<Bars::ErrorBar>({label_of(arms[i]), *interval}) : std::nullopt);
    if (interval) top = std::max(top, interval->mean + interval->half_width);
    b.sets.push_back(label_of(arms[i]));
    b.colors.push_back(colors[i]);
    b.patterns.push_back(run_pattern(arms[i].run));
    std::vector<double> column(arms.size(), 0.0);
    column[i] = v;
    b.values.push_back(std::move(column));
    top = std::max(top, v);
  }
  b.y_hi = top * 1.1;
  bars(chart, b);
  title_repeats(chart, ChartKind::throughput,
                std::any_of(b.errors.begin(), b.errors.end(), [](const auto& e) { return e.has_value(); }),
                "mean and 95 % interval over repeats");
}

void memory(QChart* chart, const std::vector<ArmResults>& arms) {
  Bars b;
  b.stacked = true;
  b.horizontal = true;
  b.y_title = "MiB per process";
  b.y_format = "%.1f";
  std::vector<std::string> tags;
  std::vector<std::vector<double>> rows;  // per category, per tag (MiB)
  double top = 0.0;
  for (const ArmResults& a : arms)
    for (const ProcessMemory& p : process_memory(a)) {
      QString category = label_of(a);
      if (!p.kind.empty()) category += QString(" · %1").arg(QString::fromStdString(p.kind));
      if (p.gpu) category += " (GPU)";
      b.categories << category;
      std::vector<double> row;
      double sum = 0.0;
      for (const auto& [tag, bytes] : p.tags) {
        auto it = std::find(tags.begin(), tags.end(), tag);
        const size_t at = static_cast<size_t>(it - tags.begin());
        if (it == tags.end()) tags.push_back(tag);
        if (row.size() <= at) row.resize(at + 1, 0.0);
        row[at] = bytes / (1024.0 * 1024.0);
        sum += row[at];
      }
      rows.push_back(row);
      top = std::max(top, sum);
    }
  // Horizontal bars list their first category at the bottom: reversed, the arms read
  // top down in order.
  std::reverse(b.categories.begin(), b.categories.end());
  std::reverse(rows.begin(), rows.end());
  for (size_t t = 0; t < tags.size(); ++t) {
    b.sets.push_back(QString::fromStdString(tags[t]));
    b.colors.push_back(arm_color(t + 3));
    std::vector<double> column;
    for (const auto& row : rows) column.push_back(t < row.size() ? row[t] : 0.0);
    b.values.push_back(column);
  }
  b.y_hi = top > 0 ? top * 1.1 : 1.0;
  bars(chart, b);
}

void communication(QChart* chart, const std::vector<ArmResults>& arms) {
  Bars b;
  b.sets = {"bytes per process per epoch"};
  b.colors = {arm_color(1)};
  b.values = {{}};
  b.y_title = "bytes / process / epoch";
  b.log_y = true;
  b.y_format = "%.0e";
  double lo = std::numeric_limits<double>::infinity(), hi = 0.0;
  std::vector<double> values;
  for (const ArmResults& a : arms) {
    QString text;
    const std::optional<Interval> interval = over_repeats(a, "bytes_per_process_per_epoch", "", text);
    const double v = interval ? interval->mean : bytes_per_process_per_epoch(a);
    if (text.isEmpty() || !(v > 0)) text = v > 0 ? QString::fromStdString(analysis::format_bytes(v)) : QString("none");
    b.categories << category_label(a) + "<br>" + text;
    b.errors.push_back(interval ? std::optional<Bars::ErrorBar>({label_of(a), *interval}) : std::nullopt);
    values.push_back(v);
    if (v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
    if (interval && v > 0) hi = std::max(hi, v + interval->half_width);
  }
  lo = std::isfinite(lo) ? lo / 10.0 : 1.0;
  hi = hi > 0 ? hi * 3.0 : 10.0;
  b.y_lo = std::pow(10.0, std::floor(std::log10(lo)));
  b.y_hi = std::pow(10.0, std::ceil(std::log10(hi)));
  // An arm without traffic sits at the axis floor: no bar, "none" in its label.
  for (double v : values) b.values[0].push_back(v > 0 ? v : b.y_lo);
  bars(chart, b);
  title_repeats(chart, ChartKind::communication,
                std::any_of(b.errors.begin(), b.errors.end(), [](const auto& e) { return e.has_value(); }),
                "mean and 95 % interval over repeats");
}

void cumulative(QChart* chart, const std::vector<ArmResults>& arms) {
  LineSpec spec;
  spec.x_title = "wall time (s)";
  spec.y_title = "bytes";
  spec.log_y = true;
  spec.y_format = "%.0e";
  spec.points = [](const ArmResults& a) {
    Points pts;
    for (const BytesPoint& b : cumulative_bytes(a)) pts.append({b.wall, b.bytes});
    return pts;
  };
  lines(chart, arms, spec);
}

// "s per epoch", saying so when the arms' epochs hold different numbers of samples (runs
// of a comparison on different fractions of the data): their times per epoch do not
// compare without it.
QString epoch_axis_title(const std::vector<ArmResults>& arms) {
  std::vector<double> sizes;
  for (const ArmResults& a : arms) {
    const double epochs = number(a.summary, "epochs"), samples = number(a.summary, "samples");
    if (!(epochs > 0) || !(samples > 0)) continue;
    const double size = std::round(samples / epochs);
    if (std::none_of(sizes.begin(), sizes.end(), [&](double s) { return std::abs(s - size) <= 0.01 * size; }))
      sizes.push_back(size);
  }
  if (sizes.size() < 2) return "s per epoch";
  std::sort(sizes.begin(), sizes.end());
  QStringList text;
  for (double s : sizes) text << QString::number(s, 'f', 0);
  return "s per epoch (epochs differ: " + text.join(", ") + " samples)";
}

void projection(QChart* chart, const std::vector<ArmResults>& arms) {
  chart->removeAllSeries();
  const std::vector<std::string> links = projection_links();
  QCategoryAxis* x = chart->axes(Qt::Horizontal).isEmpty() ? nullptr
                                                            : qobject_cast<QCategoryAxis*>(chart->axes(Qt::Horizontal).front());
  QLogValueAxis* y = chart->axes(Qt::Vertical).isEmpty() ? nullptr
                                                          : qobject_cast<QLogValueAxis*>(chart->axes(Qt::Vertical).front());
  if (!x || !y) {
    reset(chart);
    x = new QCategoryAxis;
    x->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
    x->append("loopback", 0.0);
    for (size_t i = 0; i < links.size(); ++i) x->append(QString::fromStdString(links[i]), static_cast<double>(i + 1));
    x->setRange(-0.4, static_cast<double>(links.size()) + 0.4);
    x->setTitleText("link (lines: projected from the run; markers: measured on the link the arm ran on)");
    y = log_axis("s per epoch", 1.0, 10.0, "%g");
    chart->addAxis(x, Qt::AlignBottom);
    chart->addAxis(y, Qt::AlignLeft);
  }
  double lo = std::numeric_limits<double>::infinity(), hi = 0.0;
  struct Pending {
    QLineSeries* line;
    QScatterSeries* measured;
  };
  std::vector<Pending> pending;
  const std::vector<QColor> colors = arm_colors(arms);
  for (size_t i = 0; i < arms.size(); ++i) {
    const ArmProjection p = project_arm(arms[i]);
    if (!p.unavailable.empty()) continue;
    auto* line = new QLineSeries;
    line->setName(QString::fromStdString(p.arm));
    QPen pen(colors[i]);
    pen.setWidthF(2.0);
    pen.setStyle(run_pen_style(arms[i].run));
    line->setPen(pen);
    line->setPointsVisible(true);
    for (size_t l = 0; l < p.links.size(); ++l) {
      const double s = p.links[l].seconds_per_epoch;
      if (!(s > 0)) continue;
      line->append(static_cast<double>(l + 1), s);
      lo = std::min(lo, s), hi = std::max(hi, s);
    }
    auto* measured = new QScatterSeries;
    measured->setName(QString::fromStdString(p.arm) + " (measured)");
    measured->setColor(colors[i]);
    measured->setBorderColor(Qt::black);
    measured->setMarkerSize(11.0);
    const auto at = std::find(links.begin(), links.end(), p.measured_link);
    const double mx = at == links.end() ? 0.0 : static_cast<double>(at - links.begin() + 1);
    if (p.measured_seconds_per_epoch > 0) {
      measured->append(mx, p.measured_seconds_per_epoch);
      lo = std::min(lo, p.measured_seconds_per_epoch), hi = std::max(hi, p.measured_seconds_per_epoch);
    }
    pending.push_back({line, measured});
  }
  if (!std::isfinite(lo) || !(hi > 0)) lo = 1.0, hi = 10.0;
  y->setRange(std::pow(10.0, std::floor(std::log10(lo))), std::pow(10.0, std::ceil(std::log10(hi * 1.0001))));
  y->setTitleText(epoch_axis_title(arms));
  for (const Pending& p : pending) {
    attach(chart, p.line, x, y);
    attach(chart, p.measured, x, y);
    hide_from_legend(chart, p.measured);
  }
  show_legend(chart, pending.size());
}

}  // namespace

const std::vector<ChartInfo>& chart_kinds() {
  static const std::vector<ChartInfo> kinds = {
      {ChartKind::throughput, "throughput", "Throughput per arm"},
      {ChartKind::quality_wall, "quality-wall", "Test quality against wall time"},
      {ChartKind::quality_samples, "quality-samples", "Test quality against training samples"},
      {ChartKind::loss, "loss", "Training loss against training samples"},
      {ChartKind::memory, "memory", "Peak memory per process, by tag"},
      {ChartKind::communication, "communication", "Communication per process per epoch (log scale)"},
      {ChartKind::cumulative_bytes, "cumulative-bytes", "Bytes moved over time (log scale)"},
      {ChartKind::projection, "projection", "Time per epoch over link profiles: measured and projected"},
  };
  return kinds;
}

const ChartInfo& chart_info(ChartKind kind) {
  for (const ChartInfo& c : chart_kinds())
    if (c.kind == kind) return c;
  return chart_kinds().front();
}

QChart* make_chart(ChartKind kind, const std::vector<ArmResults>& arms) {
  auto* chart = new QChart;
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->setTitle(chart_info(kind).title);
  fill_chart(chart, kind, arms);
  return chart;
}

void fill_chart(QChart* chart, ChartKind kind, const std::vector<ArmResults>& arms) {
  switch (kind) {
    case ChartKind::throughput: return throughput(chart, arms);
    case ChartKind::quality_wall: return quality(chart, arms, false);
    case ChartKind::quality_samples: return quality(chart, arms, true);
    case ChartKind::loss: return loss(chart, arms);
    case ChartKind::memory: return memory(chart, arms);
    case ChartKind::communication: return communication(chart, arms);
    case ChartKind::cumulative_bytes: return cumulative(chart, arms);
    case ChartKind::projection: return projection(chart, arms);
  }
}

std::vector<QColor> arm_colors(const std::vector<ArmResults>& arms) {
  std::vector<std::string> names;
  std::vector<QColor> out;
  for (const ArmResults& a : arms) {
    auto it = std::find(names.begin(), names.end(), a.name);
    if (it == names.end()) it = names.insert(names.end(), a.name);
    out.push_back(arm_color(static_cast<size_t>(it - names.begin())));
  }
  return out;
}

Qt::PenStyle run_pen_style(int run) {
  static const Qt::PenStyle kStyles[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::DashDotLine};
  return kStyles[static_cast<size_t>(std::max(run, 0)) % 4];
}

QColor arm_color(size_t index) {
  // Tableau 10: distinct in print and for most colour-blind readers.
  static const QColor kColors[] = {QColor(0x4e, 0x79, 0xa7), QColor(0xf2, 0x8e, 0x2b), QColor(0xe1, 0x57, 0x59),
                                   QColor(0x76, 0xb7, 0xb2), QColor(0x59, 0xa1, 0x4f), QColor(0xed, 0xc9, 0x48),
                                   QColor(0xb0, 0x7a, 0xa1), QColor(0xff, 0x9d, 0xa7), QColor(0x9c, 0x75, 0x5f),
                                   QColor(0xba, 0xb0, 0xac)};
  return kColors[index % (sizeof kColors / sizeof kColors[0])];
}

}  // namespace quartet::gui

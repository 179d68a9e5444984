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
  // The points' size, where they are drawn (60 points or fewer); Qt 6.4 draws a point
  // twice as wide as this.
  double marker_size = 3.5;
  std::function<Points(const ArmResults&)> points;
  std::function<QString(const ArmResults&)> name;  // the arm's line; empty: its label
  // The lower and upper edges of a band shaded under the arm's line (empty: none).
  std::function<std::pair<Points, Points>(const ArmResults&)> band;
  // A thin pale line under the arm's (the raw values of a smoothed line), left out of the
  // legend; empty: none.
  std::function<Points(const ArmResults&)> faint;
};

// What an arm's pale raw line is called: "<arm> (raw)".
QString raw_name(const QString& arm) { return arm + " (raw)"; }

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
  if (y && (qobject_cast<QLogValueAxis*>(y) != nullptr) != spec.log_y) x = nullptr;  // the scale changed
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
  bool new_faint = false;  // a pale line made now lies over the lines made before it
  enum class Look { arm, faint, reference };
  // An arm's line; its pale raw line (thin, no points, not in the legend); or a reference
  // line (grey, thin, dashed, no points).
  auto place = [&](const QString& name, Points pts, const QColor& color, int run, Look look, size_t order = 0) {
    if (spec.log_y) pts.erase(std::remove_if(pts.begin(), pts.end(), [](const QPointF& p) { return !(p.y() > 0); }), pts.end());
    if (pts.isEmpty()) return;
    wanted << name;
    QLineSeries* s = series_named<QLineSeries>(chart, name);
    if (!s) {
      s = new QLineSeries;
      s->setName(name);
      attach(chart, s, x, y);
      new_faint = new_faint || look == Look::faint;
    }
    // Set on every fill: a comparison that gains or loses a run may recolour an arm.
    QColor c = look == Look::reference ? QColor(120, 120, 120) : color;
    if (look == Look::faint) c.setAlpha(70);
    QPen pen = look == Look::reference ? QPen(c) : run_pen(c, run);
    // Each arm's line a little thinner than the one before: where arms coincide (single,
    // accumulate and data_parallel compute the same updates) each still shows at the edges
    // of the line drawn over it.
    pen.setWidthF(look == Look::arm ? std::max(1.2, 4.0 - 0.9 * static_cast<double>(order)) : 1.2);
    if (look == Look::reference) pen.setStyle(Qt::DashLine);
    s->setPen(pen);
    s->setPointsVisible(look == Look::arm && pts.size() <= 60);
    s->setMarkerSize(spec.marker_size);
    s->replace(pts);
    if (look == Look::faint) hide_from_legend(chart, s);
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
  const std::vector<size_t> order = arm_name_indices(arms);  // an arm's width, the same in every run
  // Pale lines first, so that they lie under every arm's own.
  if (spec.faint)
    for (size_t i = 0; i < arms.size(); ++i) {
      const QString name = spec.name ? spec.name(arms[i]) : label_of(arms[i]);
      place(raw_name(name), spec.faint(arms[i]), colors[i], arms[i].run, Look::faint);
    }
  for (size_t i = 0; i < arms.size(); ++i) {
    const QString name = spec.name ? spec.name(arms[i]) : label_of(arms[i]);
    place(name, spec.points(arms[i]), colors[i], arms[i].run, Look::arm, order[i]);
    if (spec.band) {
      const auto [lower, upper] = spec.band(arms[i]);
      place_band(error_bar_name(name), lower, upper, colors[i]);
    }
  }
  for (const auto& [name, pts] : extra) place(name, pts, QColor(), 0, Look::reference);
  for (QAbstractSeries* s : chart->series())
    if (!wanted.contains(s->name())) {
      chart->removeSeries(s);
      delete s;
    }
  // A chart draws its series in the order they were added: a pale line made for an arm
  // that started later (a live run) goes under the others by adding them again after it.
  if (new_faint) {
    for (QAbstractSeries* s : chart->series()) {
      if (s->name().endsWith(raw_name(""))) continue;
      chart->removeSeries(s);
      attach(chart, s, x, y);
    }
    // The legend's markers are made anew: pale lines and bands stay out of it.
    for (QAbstractSeries* s : chart->series())
      for (QLegendMarker* m : chart->legend()->markers(s))
        m->setVisible(!qobject_cast<QAreaSeries*>(s) && !s->name().endsWith(raw_name("")));
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
  int legend_entries = 0;  // bands and raw lines stay out of the legend
  for (QAbstractSeries* s : chart->series())
    if (!qobject_cast<QAreaSeries*>(s) && !s->name().endsWith(raw_name(""))) ++legend_entries;
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
  spec.marker_size = 4.5;  // a run of few evaluations is its points: large enough to see
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
// Smoothed as TensorBoard smooths (smooth_losses), the raw values pale beneath.
void loss(QChart* chart, const std::vector<ArmResults>& arms) {
  const QVariant weight = chart->property(kSmoothingProperty);
  const double w = weight.isValid() ? weight.toDouble() : kDefaultSmoothing;
  LineSpec spec;
  spec.x_title = "training samples";
  spec.y_title = "loss";  // short: the title says training
  spec.y_format = "%.3g";
  spec.marker_size = 2.5;  // a federated arm's few losses: points, not blots over the others
  spec.log_y = chart->property(kLogYProperty).toBool();
  auto raw = [](const ArmResults& a) {
    Points pts;
    for (const auto& [samples, value] : loss_points(a)) pts.append({static_cast<double>(samples), value});
    return pts;
  };
  spec.points = [raw, w](const ArmResults& a) {
    Points pts = raw(a);
    std::vector<double> ys;
    for (const QPointF& p : pts) ys.push_back(p.y());
    ys = smooth_losses(ys, w);
    for (qsizetype i = 0; i < pts.size(); ++i) pts[i].setY(ys[static_cast<size_t>(i)]);
    return pts;
  };
  if (w > 0) spec.faint = raw;
  lines(chart, arms, spec);
  chart->setTitle(QString::fromUtf8(chart_info(ChartKind::loss).title) +
                  (w > 0 ? QString(" · smoothed %1").arg(w, 0, 'f', 2) : QString()));
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
  // Values are log10 of what is shown, on an axis labelled at each decade 10^k with
  // decade_label(10^k) ("1 MB"): a log scale whose labels carry units. y_lo, y_hi are
  // then decades too. Empty: values as they are.
  std::function<QString(double)> decade_label;
  double y_lo = 0.0, y_hi = 1.0;
  const char* y_format = "%.0f";
};

// The value axis's range (and, on a decade axis, its labels) for `b`.
void set_value_range(QAbstractAxis* y, const Bars& b) {
  if (auto* cy = qobject_cast<QCategoryAxis*>(y)) {
    for (const QString& label : cy->categoriesLabels()) cy->remove(label);
    cy->setRange(b.y_lo, b.y_hi);
    for (double k = std::ceil(b.y_lo); k <= b.y_hi; k += 1.0) cy->append(b.decade_label(std::pow(10.0, k)), k);
  } else if (auto* ly = qobject_cast<QLogValueAxis*>(y)) {
    ly->setRange(b.y_lo, b.y_hi);
  } else if (auto* vy = qobject_cast<QValueAxis*>(y)) {
    vy->setRange(b.y_lo, b.y_hi);
    vy->applyNiceNumbers();
  }
}

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
    const double at = static_cast<double>(c);
    double lo = i.mean - i.half_width, hi = i.mean + i.half_width;
    if (b.decade_label) lo = lo > 0 ? std::log10(lo) : b.y_lo, hi = std::log10(hi);
    lo = std::max(lo, b.y_lo);
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
  // Whether the value axis is of the kind `b` wants.
  auto fits = [&b](QAbstractAxis* axis) {
    return (qobject_cast<QLogValueAxis*>(axis) != nullptr) == b.log_y &&
           (qobject_cast<QCategoryAxis*>(axis) != nullptr) == static_cast<bool>(b.decade_label);
  };
  bool same = series && x && y && x->categories() == b.categories && series->count() == static_cast<int>(b.sets.size()) &&
              fits(y);
  for (int i = 0; same && i < series->count(); ++i) same = series->barSets()[i]->label() == b.sets[i];
  if (same) {
    for (size_t i = 0; i < b.sets.size(); ++i)
      for (int c = 0; c < b.categories.size(); ++c) series->barSets()[static_cast<int>(i)]->replace(c, b.values[i][c]);
    set_value_range(y, b);
    error_bars(chart, b, x, y);
    return;
  }
  // Rebuild the series, but keep the axes: a chart whose axes are swapped while it is
  // shown can keep drawing the old ones' labels.
  chart->removeAllSeries();
  if (y && !fits(y)) {
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
    } else if (b.decade_label) {
      auto* cy = new QCategoryAxis;
      cy->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
      y = cy;
    } else {
      y = value_axis(b.y_title, b.y_lo, b.y_hi, b.y_format);
    }
  }
  y->setTitleText(b.y_title);
  if (auto* vy = qobject_cast<QValueAxis*>(y); vy && !b.decade_label) vy->setLabelFormat(b.y_format);
  set_value_range(y, b);
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
  b.y_format = b.y_hi < 10.0 ? "%.1f" : "%.0f";  // an empty chart's 0 … 1 reads 0.0, 0.5, 1.0
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

// One bar per arm in its colour (a run's bars in its pattern), on a log scale whose axis
// says bytes ("1 MB"); an arm with repeats at its mean, with an error bar.
void communication(QChart* chart, const std::vector<ArmResults>& arms) {
  Bars b;
  b.stacked = true;
  b.y_title = "bytes / process / epoch";
  b.decade_label = [](double bytes) {
    static const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    int u = 0;
    while (bytes >= 999.5 && u < 5) bytes /= 1000.0, ++u;
    return QString("%1 %2").arg(bytes, 0, 'f', 0).arg(kUnits[u]);
  };
  const std::vector<QColor> colors = arm_colors(arms);
  double lo = std::numeric_limits<double>::infinity(), hi = 0.0;
  std::vector<double> values;
  for (size_t i = 0; i < arms.size(); ++i) {
    const ArmResults& a = arms[i];
    QString text;
    const std::optional<Interval> interval = over_repeats(a, "bytes_per_process_per_epoch", "", text);
    const double v = interval ? interval->mean : bytes_per_process_per_epoch(a);
    if (text.isEmpty() || !(v > 0)) text = v > 0 ? QString::fromStdString(analysis::format_bytes(v)) : QString("none");
    b.categories << category_label(a) + "<br>" + text;
    b.errors.push_back(interval ? std::optional<Bars::ErrorBar>({label_of(a), *interval}) : std::nullopt);
    b.sets.push_back(label_of(a));
    b.colors.push_back(colors[i]);
    b.patterns.push_back(run_pattern(a.run));
    values.push_back(v);
    if (v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
    if (interval && v > 0) hi = std::max(hi, v + interval->half_width);
  }
  lo = std::isfinite(lo) ? lo / 10.0 : 1.0;
  hi = hi > 0 ? hi * 3.0 : 10.0;
  b.y_lo = std::max(0.0, std::floor(std::log10(std::max(lo, 1.0))));
  b.y_hi = std::ceil(std::log10(std::max(hi, 10.0)));
  // log10 of the bytes in the arm's own category; nothing in the others'. An arm without
  // traffic has no bar, "none" in its label.
  for (size_t i = 0; i < arms.size(); ++i) {
    std::vector<double> column(arms.size(), 0.0);
    column[i] = values[i] > 1.0 ? std::log10(values[i]) : 0.0;
    b.values.push_back(std::move(column));
  }
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
    line->setPen(run_pen(colors[i], arms[i].run));
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

std::vector<size_t> arm_name_indices(const std::vector<ArmResults>& arms) {
  std::vector<std::string> names;
  std::vector<size_t> out;
  for (const ArmResults& a : arms) {
    auto it = std::find(names.begin(), names.end(), a.name);
    if (it == names.end()) it = names.insert(names.end(), a.name);
    out.push_back(static_cast<size_t>(it - names.begin()));
  }
  return out;
}

std::vector<QColor> arm_colors(const std::vector<ArmResults>& arms) {
  std::vector<QColor> out;
  for (size_t i : arm_name_indices(arms)) out.push_back(arm_color(i));
  return out;
}

Qt::PenStyle run_pen_style(int run) {
  static const Qt::PenStyle kStyles[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::DashDotLine};
  return kStyles[static_cast<size_t>(std::max(run, 0)) % 4];
}

QPen run_pen(const QColor& color, int run) {
  QPen pen(color);
  pen.setWidthF(2.0);
  // In pen widths: dashes of 4 px and gaps of 3 px at width 2, so a 16-px legend marker
  // shows two of them.
  switch (run_pen_style(run)) {
    case Qt::DashLine: pen.setDashPattern({2.0, 1.5}); break;
    case Qt::DotLine: pen.setDashPattern({0.6, 1.2}); break;
    case Qt::DashDotLine: pen.setDashPattern({2.0, 1.0, 0.6, 1.0}); break;
    default: break;
  }
  return pen;
}

std::vector<double> smooth_losses(const std::vector<double>& values, double weight) {
  weight = std::clamp(weight, 0.0, 0.999);
  std::vector<double> out;
  out.reserve(values.size());
  double last = 0.0;
  int n = 0;
  for (double v : values) {
    if (!std::isfinite(v)) {
      out.push_back(v);
      continue;
    }
    last = last * weight + (1.0 - weight) * v;
    ++n;
    out.push_back(last / (1.0 - std::pow(weight, n)));
  }
  return out;
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

#pragma once

// The charts: one code path for the app's views and the offscreen report. Each chart is
// filled from a snapshot of arms; filling again refreshes it in place (line series are
// replace()d, bar series rebuilt), so a live view refreshes on a timer from the latest
// snapshot and never appends from a worker thread.

#include <QChart>
#include <QColor>
#include <QPen>
#include <QString>
#include <vector>

#include "analysis/results_model.h"

namespace quartet::gui {

enum class ChartKind {
  throughput,        // samples/s per arm (bars)
  quality_wall,      // test metric against wall time (a line per arm)
  quality_samples,   // test metric against training samples (a line per arm)
  loss,              // training loss against training samples (a line per arm)
  memory,            // tracked peak per tag, per kind of process (stacked bars, MiB)
  communication,     // bytes per process per epoch (bars, log scale)
  cumulative_bytes,  // bytes moved against wall time (a line per arm, log scale)
  projection,        // time per epoch: measured, and projected over link profiles
};

struct ChartInfo {
  ChartKind kind;
  const char* id;     // file name stem in a report: "throughput", "quality-wall", …
  const char* title;  // what the chart shows, in words
};

// Every chart, in the report's order.
const std::vector<ChartInfo>& chart_kinds();
const ChartInfo& chart_info(ChartKind kind);

// A new chart of `kind` over `arms` (labels name them); the caller owns it.
QChart* make_chart(ChartKind kind, const std::vector<analysis::ArmResults>& arms);

// Refreshes a chart made by make_chart(kind, …) with a newer snapshot.
void fill_chart(QChart* chart, ChartKind kind, const std::vector<analysis::ArmResults>& arms);

// The colour of the i-th arm, the same in every chart.
QColor arm_color(size_t index);

// Each arm's colour, by name: an arm name has one colour in every chart, whichever runs
// it comes from (the i-th distinct name in `arms` gets arm_color(i)).
std::vector<QColor> arm_colors(const std::vector<analysis::ArmResults>& arms);
// The index of each arm's name among the distinct names of `arms`, in order of appearance.
std::vector<size_t> arm_name_indices(const std::vector<analysis::ArmResults>& arms);

// How a run's lines are drawn: the first run solid, the next dashed, then dotted, …
Qt::PenStyle run_pen_style(int run);
// A pen of `color` in the run's style, its dashes short enough that a legend's short
// segment shows them.
QPen run_pen(const QColor& color, int run);

// Settings a chart keeps as Qt properties; fill_chart reads them (the app's controls set
// them, the report leaves the defaults).
inline constexpr const char* kSmoothingProperty = "quartet_smoothing";  // loss: the EMA weight, 0 … 0.99
inline constexpr const char* kLogYProperty = "quartet_log_y";           // loss: a log-scale y axis
inline constexpr double kDefaultSmoothing = 0.8;                         // per-step losses of small batches need it

// TensorBoard's smoothing: an exponential moving average with weight `weight` (0: none),
// debiased so that its start is not pulled towards zero; non-finite values are passed over.
std::vector<double> smooth_losses(const std::vector<double>& values, double weight);

}  // namespace quartet::gui

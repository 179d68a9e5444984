#pragma once

// The charts: one code path for the app's views and the offscreen report. Each chart is
// filled from a snapshot of arms; filling again refreshes it in place (line series are
// replace()d, bar series rebuilt), so a live view refreshes on a timer from the latest
// snapshot and never appends from a worker thread.

#include <QChart>
#include <QColor>
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

// How a run's lines are drawn: the first run solid, the next dashed, then dotted, …
Qt::PenStyle run_pen_style(int run);

}  // namespace quartet::gui

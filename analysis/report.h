#pragma once

// What a run's report says, without Qt: the side-by-side table of the arms, the link
// projection with its assumptions, and the whole Markdown page (RUN_DIR/report/report.md).
// The Qt report (gui/report.h) adds the charts and the HTML page around the same tables.

#include <string>
#include <utility>
#include <vector>

#include "analysis/results_model.h"
#include "analysis/tables.h"

namespace quartet::analysis {

struct ReportFormats {
  bool png = false, svg = false, md = false, html = false;
};

// "png,svg,md,html" (any subset, comma-separated). html shows charts, so it adds png when
// neither png nor svg is asked for; md shows the images written beside it, and alone is
// the tables without charts. Throws std::invalid_argument naming a format it does not
// know, or for an empty list.
ReportFormats parse_formats(const std::string& list);

// Whether `formats` need charts drawn (png, svg, html): the Qt build's quartet-report.
bool needs_charts(const ReportFormats& formats);

// A chart image beside report.md.
struct ChartImage {
  std::string file;     // "throughput.png"
  std::string title;
  std::string caption;  // what it shows, in words
};

// One row per arm, from its summary or, while it runs, its records (summary.md and the
// report show this table), and what its columns mean.
Table arms_table(const std::vector<ArmResults>& arms);
std::string arms_table_note();

// arms_table() as a terminal `columns` wide shows it: plain text, the columns that do
// not fit left out (the least telling first: activations, RSS, best quality, regime, …;
// arm, status, samples/s and final quality stay), and a line naming those left out.
std::string arms_table_text(const std::vector<ArmResults>& arms, int columns);

// One row per arm with differential privacy (its summary's "privacy"): clip, noise,
// sampling rate, rounds, the final epsilon at its delta, and its final quality; empty
// rows when no arm has DP.
Table privacy_table(const std::vector<ArmResults>& arms);
std::string privacy_table_note();

// One row per arm: its critical path per epoch, measured and projected time per epoch
// on every link profile (projection_links()).
Table projection_table(const std::vector<ArmResults>& arms);

// "CPU …, N cores; Release build of <commit> (<compiler>); <os>", from spec.json's environment.
std::string environment_line(const RunResults& run);

// The run's warnings and its arms' errors, one sentence each.
std::vector<std::string> problems(const RunResults& run);

// Markdown: the arms' table and its note (and the privacy table when an arm has DP, the repeats'
// statistics when arms were repeated); the projection's assumptions and table.
std::string summary_markdown(const RunResults& run);
std::string projection_markdown(const RunResults& run);

// Per pipeline arm: its stages' table (analysis/pipeline_view.h), the balance of their
// compute, and its step timeline's image (timeline_file()) where the records carry one.
// "" for a run without pipeline arms.
std::string pipeline_markdown(const RunResults& run);

// The timeline images pipeline_markdown() shows: file name and SVG text, one per pipeline
// arm whose records carry a timeline. They need no Qt: every report writes them.
std::vector<std::pair<std::string, std::string>> pipeline_timeline_images(const RunResults& run);

// The whole report.md: the run, its problems, the summary, the pipeline stages, `charts`
// (none: no charts section) and the projection.
std::string report_markdown(const RunResults& run, const std::vector<ChartImage>& charts);

}  // namespace quartet::analysis

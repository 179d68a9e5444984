#pragma once

// `quartet report`: a run folder's charts (rendered offscreen), its summary table and the
// link projection with its assumptions, written into RUN_DIR/report/ and nowhere else.

#include <filesystem>
#include <string>
#include <vector>

#include "gui/results_model.h"

namespace quartet::gui {

struct ReportFormats {
  bool png = false, svg = false, md = false, html = false;
};

// "png,svg,md,html" (any subset, comma-separated). md and html show charts, so they add
// png when neither png nor svg is asked for. Throws std::invalid_argument naming a
// format it does not know, or for an empty list.
ReportFormats parse_formats(const std::string& list);

// Writes the report of `run` into run.dir / "report" (created when missing; files in it
// are replaced). Requires a QApplication for the charts. Returns the files written.
// Throws std::runtime_error naming a file it cannot write.
std::vector<std::filesystem::path> write_report(const RunResults& run, const ReportFormats& formats);

// The parts, for the app and the tests: Markdown tables of the arms and of the
// projection (measured and projected figures marked), and the whole HTML page whose
// charts are `<chart id>.<image_ext>` beside it.
std::string summary_markdown(const RunResults& run);
std::string projection_markdown(const RunResults& run);
std::string report_html(const RunResults& run, const std::string& image_ext);

}  // namespace quartet::gui

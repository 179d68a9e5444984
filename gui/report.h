#pragma once

// `quartet-report`: a run folder's charts (rendered offscreen), and the report around
// them, in Markdown and HTML, written into RUN_DIR/report/ and nowhere else. The tables
// and the Markdown page are analysis/report.h's.

#include <filesystem>
#include <string>
#include <vector>

#include "analysis/plan/cluster.h"
#include "analysis/report.h"

namespace quartet::gui {

// Writes the report of `run` into run.dir / "report" (created when missing; files in it
// are replaced). Requires a QApplication for the charts. With a cluster profile, the
// Markdown and HTML pages add every arm predicted on it beside its measurement. Returns
// the files written. Throws std::runtime_error naming a file it cannot write.
std::vector<std::filesystem::path> write_report(const analysis::RunResults& run,
                                                const analysis::ReportFormats& formats,
                                                const analysis::plan::ClusterProfile* cluster = nullptr);

// The whole HTML page, whose charts are `<chart id>.<image_ext>` beside it.
std::string report_html(const analysis::RunResults& run, const std::string& image_ext,
                        const analysis::plan::ClusterProfile* cluster = nullptr);

}  // namespace quartet::gui

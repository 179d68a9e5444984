#pragma once

// `quartet report RUN_DIR`: a run's report, written into RUN_DIR/report/ and nowhere else.
// The Markdown page (--format md: the arms' table and the link projection with its
// assumptions) is written here, without Qt. Charts (png, svg) and the HTML page need Qt:
// they are the work of quartet-report, beside quartet in a Qt build, which this command
// hands over to, as `git foo` runs `git-foo`.

#include <optional>
#include <string>

#include "analysis/plan/cluster.h"
#include "analysis/report.h"

namespace CLI {
class App;
}

namespace quartet::runner {

struct ReportOptions {
  std::string run_dir;
  std::string formats = "png,svg,md,html";
  bool quiet = false;
  std::string cluster;  // a cluster profile: the report adds each arm predicted on it beside its measurement
};

// Adds the `report` subcommand to `app`, bound to `options`.
CLI::App* add_report_command(CLI::App& app, ReportOptions& options);
// Adds the report's arguments to `command` (quartet report, or quartet-report itself).
void add_report_options(CLI::App& command, ReportOptions& options);

// The formats, the run and the cluster profile (when --cluster names one) `options` name.
// For bad input (an unknown format, no such folder, not a run folder, a corrupt file, a
// bad profile) prints one line naming it and returns false: exit code 2.
bool read_report_input(const ReportOptions& options, analysis::ReportFormats& formats, analysis::RunResults& run,
                       std::optional<analysis::plan::ClusterProfile>& cluster);


// Writes report.md and prints it (unless quiet) when md is the only format; hands
// quartet's own `argv` over to quartet-report otherwise. Returns the exit code: 0
// written; 1 a file that cannot be written, or no quartet-report for charts; 2 bad input
// (no such folder, not a run folder, a corrupt file, an unknown format), with one line
// naming it.
int report_main(const ReportOptions& options, int argc, char** argv);

}  // namespace quartet::runner

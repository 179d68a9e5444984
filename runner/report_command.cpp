#include "runner/report_command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <vector>

#include "analysis/plan_check.h"
#include "analysis/repeats.h"
#include "analysis/report.h"
#include "runner/results.h"

namespace quartet::runner {

namespace fs = std::filesystem;

namespace {

// Runs quartet-report from beside this binary with quartet's arguments after `report`.
// Returns only when it cannot.
int hand_over(int argc, char** argv) {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) self = fs::absolute(argv[0], ec);
  const fs::path helper = self.parent_path() / "quartet-report";
  if (::access(helper.c_str(), X_OK) != 0) {
    std::cerr << "quartet report: charts and the HTML page need quartet-report beside quartet (in "
              << self.parent_path().string() << "), which the Qt build makes: install qt6-base-dev "
              << "qt6-charts-dev qt6-svg-dev libqt6opengl6-dev and configure with -DQUARTET_GUI=ON; "
              << "--format md writes the tables and the projection without Qt\n";
    return 1;
  }
  std::vector<std::string> args{helper.string()};
  int first = 1;
  while (first < argc && std::string(argv[first]) != "report") ++first;
  for (int i = first + 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  ::execv(helper.c_str(), cargs.data());
  std::cerr << "quartet report: cannot run " << helper.string() << ": " << std::strerror(errno) << "\n";
  return 1;
}

}  // namespace

CLI::App* add_report_command(CLI::App& app, ReportOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "report", "The summary table and the projection over link profiles of a run folder (Markdown, no Qt "
                "needed), and charts (PNG/SVG) and an HTML page (Qt build), written into RUN_DIR/report/");
  add_report_options(*cmd, o);
  return cmd;
}

void add_report_options(CLI::App& cmd, ReportOptions& o) {
  cmd.add_option("run_dir", o.run_dir, "the run folder (quartet run made it)")->required();
  cmd.add_option("--format", o.formats,
                 "what to write, comma-separated: png, svg, md, html (html adds png when no image format is given); "
                 "md alone is the tables and the projection (and a repeated run's error-bar charts, SVG), needs no Qt, "
                 "and prints the page")
      ->capture_default_str();
  cmd.add_flag("-q,--quiet", o.quiet, "print nothing on success");
  cmd.add_option("--cluster", o.cluster,
                 "a cluster profile (this machine's: quartet calibrate): the report (Markdown and HTML) adds every arm "
                 "predicted on it beside what it measured (docs/plan.md)");
}

bool read_report_input(const ReportOptions& o, analysis::ReportFormats& formats, analysis::RunResults& run,
                       std::optional<analysis::plan::ClusterProfile>& cluster) {
  try {
    formats = analysis::parse_formats(o.formats);
    run = analysis::load_run(o.run_dir);
  } catch (const std::exception& e) {
    std::cerr << "quartet report: " << e.what() << "\n";
    return false;
  }
  if (o.cluster.empty()) return true;
  try {
    cluster = analysis::plan::load_cluster_file(o.cluster);
    return true;
  } catch (const std::invalid_argument& e) {
    std::cerr << "quartet report: --cluster: " << e.what() << "\n";
    return false;
  }
}


int report_main(const ReportOptions& o, int argc, char** argv) {
  analysis::ReportFormats formats;
  analysis::RunResults run;
  std::optional<analysis::plan::ClusterProfile> cluster;
  if (!read_report_input(o, formats, run, cluster)) return 2;
  if (analysis::needs_charts(formats)) return hand_over(argc, argv);
  const fs::path dir = run.dir / "report";
  // Without Qt the only charts are the repeats' (SVG); the Qt report draws the rest.
  const std::vector<analysis::RepeatChart> repeat_charts = analysis::repeat_charts(run.arms);
  std::vector<analysis::ChartImage> charts;
  for (const analysis::RepeatChart& c : repeat_charts) charts.push_back(c.image);
  const std::string md = analysis::report_markdown(run, charts) + analysis::check_markdown(run, cluster ? &*cluster : nullptr);
  try {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw std::runtime_error(dir.string() + ": cannot create: " + ec.message());
    for (const auto& [file, svg] : analysis::pipeline_timeline_images(run)) write_file_atomically(dir / file, svg);
    for (const analysis::RepeatChart& c : repeat_charts) write_file_atomically(dir / c.image.file, c.svg);
    write_file_atomically(dir / "report.md", md);
  } catch (const std::exception& e) {
    std::cerr << "quartet report: " << e.what() << "\n";
    return 1;
  }
  if (!o.quiet) {
    for (const std::string& w : run.warnings) std::cerr << "quartet report: warning: " << w << "\n";
    std::cout << md;
    std::cerr << "quartet report: wrote " << (dir / "report.md").string() << "\n";
  }
  return 0;
}

}  // namespace quartet::runner

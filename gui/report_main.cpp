// quartet-report: a run folder's charts, summary and link projection, written into
// RUN_DIR/report/. Reached as `quartet report …` (the runner hands over to it when a
// format needs charts).

#include <QApplication>
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "runner/report_command.h"
#include "gui/report.h"

namespace {

// Qt's chatter about the headless platform is not the user's concern; real warnings pass.
void qt_messages(QtMsgType type, const QMessageLogContext&, const QString& message) {
  if (type == QtDebugMsg || type == QtInfoMsg) return;
  if (message.startsWith("QStandardPaths:") || message.contains("propagateSizeHints")) return;
  std::cerr << "quartet report: Qt: " << message.toStdString() << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"quartet report: charts (PNG/SVG), the summary table and the projection over link profiles of a "
               "run folder, written into RUN_DIR/report/ only."};
  app.name("quartet report");
  quartet::runner::ReportOptions options;
  quartet::runner::add_report_options(app, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  quartet::analysis::ReportFormats f;
  quartet::analysis::RunResults run;
  std::optional<quartet::analysis::plan::ClusterProfile> cluster;
  if (!quartet::runner::read_report_input(options, f, run, cluster)) return 2;
  // Charts render offscreen: a report never needs a display.
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  qInstallMessageHandler(qt_messages);
  int qt_argc = 1;
  QApplication qt(qt_argc, argv);
  try {
    const auto written = quartet::gui::write_report(run, f, cluster ? &*cluster : nullptr);
    if (!options.quiet) {
      for (const std::string& w : run.warnings) std::cerr << "quartet report: warning: " << w << "\n";
      std::cout << "quartet report: " << written.size() << " files in " << (run.dir / "report").string() << "\n";
      if (f.html) std::cout << "open " << (run.dir / "report" / "index.html").string() << " in a browser\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "quartet report: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// quartet-gui: edit experiment files, run them with live charts, compare finished runs,
// look at volumes slice by slice.

#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>
#include <iostream>

#include "gui/main_window.h"
#include "gui/compare_view.h"
#include "gui/screenshots.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("Quartet");
  QApplication::setApplicationName("quartet-gui");
  QApplication::setApplicationVersion("0.1");

  QCommandLineParser cli;
  cli.setApplicationDescription("Quartet's desktop app: edit experiment files, run them with live charts, compare "
                                "finished runs.");
  cli.addHelpOption();
  cli.addVersionOption();
  cli.addPositionalArgument("paths", "experiment files to edit, run folders to compare, NIfTI volumes to view",
                            "[paths...]");
  QCommandLineOption screenshots("screenshots", "run SPEC and save screenshots of the app into DIR, then quit",
                                 "DIR");
  QCommandLineOption spec("spec", "the experiment --screenshots runs", "SPEC");
  QCommandLineOption size("size", "window size for --screenshots, WxH (default 1400x900)", "WxH", "1400x900");
  QCommandLineOption volume("volume", "with --screenshots: also save volume.png of this NIfTI image", "IMAGE");
  QCommandLineOption mask("mask", "with --volume: its mask", "MASK");
  QCommandLineOption cluster("cluster", "a cluster profile: Compare predicts every arm on it beside what it measured",
                             "FILE");
  cli.addOptions({screenshots, spec, size, volume, mask, cluster});
  cli.process(app);

  if (cli.isSet(screenshots)) qputenv("QUARTET_GUI_NO_DIALOGS", "1");  // nobody is there to answer
  quartet::gui::MainWindow window;
  if (cli.isSet(cluster))
    if (const std::optional<QString> problem = window.compare()->set_cluster(cli.value(cluster))) {
      std::cerr << "quartet-gui: " << problem->toStdString() << "\n";
      if (cli.isSet(screenshots)) return 2;
    }
  if (cli.isSet(screenshots)) {
    const QStringList wh = cli.value(size).split('x');
    window.resize(wh.value(0).toInt() > 0 ? wh.value(0).toInt() : 1400, wh.value(1).toInt() > 0 ? wh.value(1).toInt() : 900);
    window.show();
    if (!cli.isSet(spec)) {
      std::cerr << "quartet-gui: --screenshots needs --spec SPEC\n";
      return 2;
    }
    QString problem =
        quartet::gui::make_screenshots(window, cli.value(spec), cli.positionalArguments(), cli.value(screenshots));
    if (problem.isEmpty() && cli.isSet(volume))
      problem = quartet::gui::volume_screenshot(window, cli.value(volume), cli.value(mask), cli.value(screenshots));
    if (!problem.isEmpty()) {
      std::cerr << "quartet-gui: " << problem.toStdString() << "\n";
      return 1;
    }
    return 0;
  }

  window.show();
  for (const QString& problem : window.open_paths(cli.positionalArguments()))
    std::cerr << "quartet-gui: " << problem.toStdString() << "\n";
  return app.exec();
}

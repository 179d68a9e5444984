#include "gui/screenshots.h"

#include <QDir>
#include <QEventLoop>
#include <QTabWidget>
#include <QTimer>

#include "gui/chart_panel.h"
#include "gui/charts.h"
#include "gui/compare_view.h"
#include "gui/main_window.h"
#include "gui/run_controller.h"
#include "gui/run_view.h"
#include "gui/volume_viewer.h"

namespace quartet::gui {

using analysis::ArmResults;
using analysis::RunResults;

namespace {

QString grab(MainWindow& w, int tab, const QString& path) {
  w.show_tab(tab);
  QEventLoop settle;
  QTimer::singleShot(300, &settle, &QEventLoop::quit);  // let layouts and charts settle
  settle.exec();
  return w.grab().save(path, "PNG") ? QString() : QString("%1: cannot write").arg(path);
}

// A run is worth showing live once half its arms have finished and a later one has
// records: bars at 100 % and part-way, and curves still growing.
bool mid_run(const RunResults& run) {
  size_t finished = 0;
  for (const ArmResults& a : run.arms) {
    if (a.status == "finished") ++finished;
    if (2 * finished >= run.arms.size() && a.status == "running" && samples_done(a) > 0) return true;
  }
  return false;
}

}  // namespace

QString make_screenshots(MainWindow& w, const QString& spec, const QStringList& compare_runs, const QString& out_dir) {
  QDir().mkpath(out_dir);
  const QDir out(out_dir);
  if (QString e = w.open_spec(spec); !e.isEmpty()) return e;
  if (QString e = grab(w, 0, out.filePath("editor.png")); !e.isEmpty()) return e;
  if (QString e = w.start_run(); !e.isEmpty()) return e;

  QString problem;
  bool live_taken = false;
  QEventLoop loop;
  QTimer poll;
  poll.setInterval(200);
  QObject::connect(&poll, &QTimer::timeout, &loop, [&] {
    w.run_view()->refresh();
    if (!live_taken && mid_run(w.controller()->stream().snapshot())) {
      live_taken = true;
      problem = grab(w, 1, out.filePath("run-live.png"));
    }
  });
  QObject::connect(w.controller(), &RunController::finished, &loop, &QEventLoop::quit);
  poll.start();
  loop.exec();
  poll.stop();
  if (!problem.isEmpty()) return problem;
  if (w.controller()->exit_code() != 0) return "the run failed: " + w.controller()->error();
  if (!live_taken) return "the run ended before it could be caught mid-way (give it more arms or samples)";
  w.run_view()->refresh();
  if (QString e = grab(w, 1, out.filePath("run-finished.png")); !e.isEmpty()) return e;
  for (const QString& dir : compare_runs)
    if (auto e = w.compare()->add_run(dir)) return *e;
  // The comparison one chart at a time, large enough to read every arm's name: the
  // quality against samples as compare.png, every chart as compare-<chart>.png.
  QTabWidget* tabs = w.compare()->charts()->tabs();
  for (const ChartInfo& info : chart_kinds()) {
    for (int i = 0; i < tabs->count(); ++i)
      if (tabs->tabToolTip(i) == QString::fromUtf8(info.title)) tabs->setCurrentIndex(i);
    if (QString e = grab(w, 2, out.filePath(QString("compare-%1.png").arg(info.id))); !e.isEmpty()) return e;
    if (info.kind == ChartKind::quality_samples)
      if (QString e = grab(w, 2, out.filePath("compare.png")); !e.isEmpty()) return e;
  }
  return {};
}

QString volume_screenshot(MainWindow& w, const QString& image, const QString& mask, const QString& out_dir) {
  QDir().mkpath(out_dir);
  if (QString e = w.open_volume(image); !e.isEmpty()) return e;
  if (!mask.isEmpty())
    if (QString e = w.viewer()->open_mask(mask); !e.isEmpty()) return e;
  return grab(w, 3, QDir(out_dir).filePath("volume.png"));
}

}  // namespace quartet::gui

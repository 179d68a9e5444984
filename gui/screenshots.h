#pragma once

// The README's pictures, made by the app itself: it opens an experiment, runs it,
// grabs the window while the run goes and when it is done, then a comparison of that
// run with others.

#include <QString>
#include <QStringList>

namespace quartet::gui {

class MainWindow;

// Writes editor.png, run-live.png, run-finished.png, compare.png (quality against samples)
// and compare-<chart id>.png for every chart (chart_kinds()) into `out_dir`.
// `compare_runs` are run folders shown beside the fresh run. Returns "" or the problem.
QString make_screenshots(MainWindow& window, const QString& spec, const QStringList& compare_runs,
                         const QString& out_dir);

// Opens `image` (and `mask`, when not empty) in the slice viewer and writes volume.png.
QString volume_screenshot(MainWindow& window, const QString& image, const QString& mask, const QString& out_dir);

}  // namespace quartet::gui

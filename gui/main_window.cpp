#include "gui/main_window.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDateTime>
#include <QDesktopServices>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>
#include <QUrl>

#include "gui/chart_panel.h"
#include "gui/compare_view.h"
#include "gui/folders.h"
#include "gui/report.h"
#include "gui/run_controller.h"
#include "gui/run_view.h"
#include "gui/spec_editor.h"
#include "gui/volume_viewer.h"
#include "gui/wheel_guard.h"
#include "trainers/regime.h"

namespace quartet::gui {

using analysis::load_run;
using analysis::RunResults;

namespace {

constexpr int kMaxRecent = 8;

}  // namespace

bool is_volume_file(const QString& path) { return path.endsWith(".nii") || path.endsWith(".nii.gz"); }

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  controller_ = new RunController(this);
  editor_ = new SpecEditor;
  run_view_ = new RunView(controller_);
  compare_ = new CompareView;
  viewer_ = new VolumeViewer;
  tabs_ = new QTabWidget(this);
  tabs_->addTab(editor_, tr("&Experiment"));
  tabs_->addTab(run_view_, tr("&Run"));
  tabs_->addTab(compare_, tr("&Compare"));
  tabs_->addTab(viewer_, tr("&Volumes"));
  setCentralWidget(tabs_);
  build_menus();
  statusBar()->showMessage(tr("Ready"));

  connect(editor_, &SpecEditor::modified_changed, this, &MainWindow::update_title);
  connect(controller_, &RunController::started, this, &MainWindow::update_run_actions);
  connect(controller_, &RunController::finished, this, [this](int code, const QString& error) {
    update_run_actions();
    if (code == 0)
      statusBar()->showMessage(tr("Run finished: %1").arg(controller_->out_dir()));
    else if (controller_->stopped())
      statusBar()->showMessage(tr("Stopped: the arms that finished are kept in %1; Run › Resume (F6) continues")
                                   .arg(controller_->out_dir()));
    else
      statusBar()->showMessage(tr("Run failed (exit code %1): %2").arg(code).arg(error.section('\n', 0, 0)));
    // A finished run joins the comparison.
    if (QFileInfo(controller_->out_dir() + "/spec.json").exists()) compare_->add_run(controller_->out_dir());
  });
  connect(compare_, &CompareView::run_opened, this, [this](const QString& dir) { remember(dir); });
  guard_wheel();

  QSettings settings;
  restoreGeometry(settings.value("window/geometry").toByteArray());
  restoreState(settings.value("window/state").toByteArray());
  if (!settings.contains("window/geometry")) resize(1280, 860);
  update_title();
  update_run_actions();
}

void MainWindow::build_menus() {
  auto add = [this](QMenu* menu, const QString& name, const QString& text, const QList<QKeySequence>& keys,
                    auto slot) {
    QAction* a = menu->addAction(text);
    a->setObjectName(name);
    a->setShortcuts(keys);
    connect(a, &QAction::triggered, this, slot);
    return a;
  };
  QMenu* file = menuBar()->addMenu(tr("&File"));
  add(file, "new", tr("&New Experiment"), {QKeySequence::New}, [this] {
    if (!confirm_discard()) return;
    editor_->new_spec();
    update_title();
    show_tab(0);
    statusBar()->showMessage(tr("A new experiment"));
  });
  add(file, "open", tr("&Open Experiment…"), {QKeySequence::Open}, [this] {
    if (!confirm_discard()) return;
    const QString path = QFileDialog::getOpenFileName(this, tr("Open an experiment file"), start_folder(kSpecFolder),
                                                      tr("Experiment files (*.json);;All files (*)"));
    if (path.isEmpty()) return;
    remember_folder(kSpecFolder, path);
    if (const QString e = open_spec(path); !e.isEmpty()) warn(tr("Cannot open the experiment"), e);
  });
  recent_menu_ = file->addMenu(tr("Open &Recent"));
  rebuild_recent_menu();
  add(file, "save", tr("&Save"), {QKeySequence::Save}, [this] {
    QString path = editor_->path();
    if (path.isEmpty()) {
      path = QFileDialog::getSaveFileName(this, tr("Save the experiment"), start_folder(kSpecFolder),
                                          tr("Experiment files (*.json)"));
      if (path.isEmpty()) return;
      remember_folder(kSpecFolder, path);
    }
    if (const QString e = save_spec(path); !e.isEmpty()) warn(tr("Cannot save the experiment"), e);
  });
  add(file, "save_as", tr("Save &As…"), {QKeySequence::SaveAs}, [this] {
    const QString path = QFileDialog::getSaveFileName(
        this, tr("Save the experiment as"), editor_->path().isEmpty() ? start_folder(kSpecFolder) : editor_->path(),
        tr("Experiment files (*.json)"));
    if (path.isEmpty()) return;
    remember_folder(kSpecFolder, path);
    if (const QString e = save_spec(path); !e.isEmpty()) warn(tr("Cannot save the experiment"), e);
  });
  file->addSeparator();
  add(file, "open_results", tr("Open Res&ults…"), {QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O)}, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a run folder"), start_folder(kResultsFolder));
    if (dir.isEmpty()) return;
    remember_folder(kResultsFolder, dir);
    if (const QString e = open_results(dir); !e.isEmpty()) warn(tr("Cannot open the results"), e);
  });
  add(file, "open_volume", tr("Open &Volume…"), {QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_I)}, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open a CT or MRI volume"), start_folder(kVolumeFolder),
                                                      tr("NIfTI (*.nii *.nii.gz);;All files (*)"));
    if (path.isEmpty()) return;
    remember_folder(kVolumeFolder, path);
    if (const QString e = open_volume(path); !e.isEmpty()) warn(tr("Cannot open the volume"), e);
  });
  add(file, "open_mask", tr("Open &Mask…"), {QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_M)}, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open a segmentation mask"), viewer_->mask_folder(),
                                                      tr("NIfTI (*.nii *.nii.gz);;All files (*)"));
    if (path.isEmpty()) return;
    show_tab(3);
    if (const QString e = viewer_->open_mask(path); !e.isEmpty()) warn(tr("Cannot open the mask"), e);
    else statusBar()->showMessage(tr("Opened the mask %1").arg(path));
  });
  add(file, "export_charts", tr("&Export Charts…"), {QKeySequence(Qt::CTRL | Qt::Key_E)}, [this] {
    ChartPanel* panel = tabs_->currentWidget() == compare_ ? compare_->charts() : run_view_->charts();
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Export the charts (PNG and SVG) into"),
                                                          start_folder(kResultsFolder));
    if (dir.isEmpty()) return;
    try {
      const QStringList files = panel->export_to(dir, true, true);
      statusBar()->showMessage(tr("%n chart file(s) written to %1", nullptr, static_cast<int>(files.size())).arg(dir));
    } catch (const std::exception& e) {
      warn(tr("Cannot export the charts"), QString::fromStdString(e.what()));
    }
  });
  file->addSeparator();
  add(file, "quit", tr("&Quit"), {QKeySequence::Quit}, [this] { close(); });

  QMenu* run = menuBar()->addMenu(tr("&Run"));
  add(run, "run", tr("&Start"), {QKeySequence(Qt::Key_F5), QKeySequence(Qt::CTRL | Qt::Key_R)}, [this] {
    if (const QString e = start_run(); !e.isEmpty()) warn(tr("Cannot start the run"), e);
  });
  add(run, "stop", tr("S&top"), {QKeySequence(Qt::SHIFT | Qt::Key_F5), QKeySequence(Qt::CTRL | Qt::Key_Period)},
      [this] { stop_run(); });
  add(run, "resume", tr("Res&ume"), {QKeySequence(Qt::Key_F6)}, [this] {
    if (const QString e = resume_run(); !e.isEmpty()) warn(tr("Cannot resume the run"), e);
  });
  run->addSeparator();
  add(run, "report", tr("Write &Report for the Run Shown"), {QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_R)}, [this] {
    QString index;
    if (const QString e = write_report_for_shown_run(&index); !e.isEmpty()) {
      warn(tr("Cannot write the report"), e);
      return;
    }
    // An absolute file URL: a browser resolves a relative one against its own folder.
    if (qEnvironmentVariableIsSet("QUARTET_GUI_NO_DIALOGS") || !QDesktopServices::openUrl(QUrl::fromLocalFile(index)))
      statusBar()->showMessage(tr("Report written: %1 (no browser opened: open it in one)").arg(index));
    else
      statusBar()->showMessage(tr("Report written and opened: %1").arg(index));
  });
  add(run, "results_dir", tr("Results &Folder…"), {}, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Where runs are written"), results_dir());
    if (dir.isEmpty()) return;
    QSettings().setValue("results_dir", dir);
    statusBar()->showMessage(tr("Runs go to %1").arg(dir));
  });

  QMenu* view = menuBar()->addMenu(tr("&View"));
  add(view, "view_editor", tr("&Experiment"), {QKeySequence(Qt::CTRL | Qt::Key_1)}, [this] { show_tab(0); });
  add(view, "view_run", tr("&Run"), {QKeySequence(Qt::CTRL | Qt::Key_2)}, [this] { show_tab(1); });
  add(view, "view_compare", tr("&Compare"), {QKeySequence(Qt::CTRL | Qt::Key_3)}, [this] { show_tab(2); });
  add(view, "view_volumes", tr("&Volumes"), {QKeySequence(Qt::CTRL | Qt::Key_4)}, [this] { show_tab(3); });

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  add(help, "guide", tr("Quick &Guide"), {QKeySequence::HelpContents}, [this] {
    QMessageBox::information(this, tr("Quick guide"), quick_guide());
  });
  add(help, "shortcuts", tr("&Keyboard Shortcuts"), {}, [this] {
    QMessageBox::information(this, tr("Keyboard shortcuts"), shortcuts_text());
  });
  help->addSeparator();
  add(help, "about", tr("&About Quartet"), {}, [this] {
    QStringList regimes;
    for (const std::string& r : trainers::regime_names()) regimes << QString::fromStdString(r);
    QMessageBox::about(this, tr("About Quartet"),
                       tr("<b>Quartet</b> trains one model under several regimes (%1) and shows what each costs in "
                          "throughput, memory and communication, and what accuracy it buys.<p>The runner is "
                          "<code>%2</code>.")
                           .arg(regimes.join(", "), controller_->quartet().toHtmlEscaped()));
  });
}

QAction* MainWindow::action(const QString& name) const { return findChild<QAction*>(name); }

QString MainWindow::quick_guide() const {
  return tr("<h3>Quartet in four steps</h3><ol>"
            "<li><b>Experiment</b> (Ctrl+1): open an experiment file (Ctrl+O; experiments/ has ready ones) or edit "
            "the one shown. Each field says what it takes in its tooltip; a problem shows under its field.</li>"
            "<li><b>Run</b> (F5): the arms run one after another into the results folder (Run › Results Folder). "
            "The Run tab (Ctrl+2) shows each arm's progress, elapsed time and ETA, and the charts live. Stop "
            "(Shift+F5) keeps the arms that finished; Resume (F6) runs the rest.</li>"
            "<li><b>Compare</b> (Ctrl+3): finished runs side by side; Open Results (Ctrl+Shift+O) adds run folders, "
            "the ticks pick their arms. Charts: hover for a point's values, drag to zoom, right-click or "
            "double-click to see it all; the loss can be smoothed and put on a log scale.</li>"
            "<li><b>Report</b> (Ctrl+Shift+R): charts, tables and the projection over network links as a web page "
            "in the run's report/ folder.</li></ol>"
            "<p>Volumes (Ctrl+4): a CT or MRI image (Ctrl+Shift+I) and its mask (Ctrl+Shift+M) in three planes: "
            "the wheel pages slices, a click centres the other planes on that voxel, a right-drag sets window and "
            "level.</p><p>docs/gui.md in the source tree has the whole guide.</p>");
}

QString MainWindow::shortcuts_text() const {
  QString rows;
  for (QMenu* menu : menuBar()->findChildren<QMenu*>())
    for (QAction* a : menu->actions())
      if (!a->shortcut().isEmpty() && !a->objectName().isEmpty())
        rows += QString("<tr><td>%1</td><td>&nbsp;&nbsp;%2</td></tr>")
                    .arg(QString(a->text()).remove('&'), a->shortcut().toString(QKeySequence::NativeText).toHtmlEscaped());
  return tr("<table>%1</table><p>In a chart: drag to zoom, right-click or double-click to see it all. In the slice "
            "viewer: the wheel pages slices, a click moves the crosshair, a right-drag sets window and level.</p>")
      .arg(rows);
}

QStringList MainWindow::open_paths(const QStringList& paths) {
  QStringList problems;
  for (const QString& path : paths) {
    const QString problem = QFileInfo(path).isDir() ? open_results(path)
                            : is_volume_file(path)  ? open_volume(path)
                                                    : open_spec(path);
    if (problem.isEmpty()) continue;
    warn(tr("Cannot open %1").arg(path), problem);
    problems << problem;
  }
  return problems;
}

QString MainWindow::open_spec(const QString& path) {
  try {
    editor_->load(path);
  } catch (const std::exception& e) {
    return QString::fromStdString(e.what());
  }
  remember(path);
  update_title();
  show_tab(0);
  statusBar()->showMessage(tr("Opened %1").arg(path));
  return {};
}

QString MainWindow::save_spec(const QString& path) {
  try {
    editor_->save(path);
  } catch (const std::exception& e) {
    return QString::fromStdString(e.what());
  }
  remember(path);
  update_title();
  statusBar()->showMessage(tr("Saved %1").arg(path));
  return {};
}

QString MainWindow::open_results(const QString& dir) {
  if (const auto e = compare_->add_run(dir)) return *e;
  if (const RunResults* run = compare_->run_for(dir); run && !controller_->running())
    run_view_->show_results(*run);  // never hide a live run
  update_run_actions();  // a stopped run opened can be resumed
  show_tab(2);
  statusBar()->showMessage(tr("Opened the run %1").arg(dir));
  return {};
}

QString MainWindow::open_volume(const QString& path) {
  const QString e = viewer_->open_image(path);
  if (!e.isEmpty()) return e;
  remember(path);
  show_tab(3);
  statusBar()->showMessage(tr("Opened the volume %1").arg(path));
  return {};
}

QString MainWindow::results_dir() const { return results_folder(); }

QString MainWindow::start_run() {
  if (controller_->running()) return tr("a run is already in progress; stop it first (Shift+F5)");
  if (!editor_->validate()) {
    show_tab(0);
    return tr("the experiment is not valid: %1").arg(editor_->problem());
  }
  const nlohmann::json spec = editor_->spec_as_run();
  const QString name = QString::fromStdString(spec.value("name", "run"));
  QDir().mkpath(results_dir());
  QString out = QDir(results_dir()).filePath(name + "-" + QDateTime::currentDateTime().toString("yyyyMMdd-HHmmss"));
  // Inside the working folder, a relative path reads better (and is what `quartet run` prints).
  if (const QString rel = QDir::current().relativeFilePath(out); !rel.startsWith("..")) out = rel;
  if (!controller_->start(spec, out)) return controller_->error();
  show_tab(1);
  statusBar()->showMessage(tr("Running into %1").arg(out));
  return {};
}

QString MainWindow::resumable_run() const {
  const analysis::RunResults& shown = run_view_->shown();
  if (shown.dir.empty() || (shown.status != "interrupted" && shown.status != "failed")) return {};
  return QString::fromStdString(shown.dir.string());
}

QString MainWindow::resume_run() {
  if (controller_->running()) return tr("a run is already in progress; stop it first (Shift+F5)");
  const QString dir = resumable_run();
  if (dir.isEmpty()) return tr("the run shown was not stopped and did not fail: there is nothing to resume");
  if (!controller_->resume(dir)) return controller_->error();
  show_tab(1);
  statusBar()->showMessage(tr("Resuming %1").arg(dir));
  return {};
}

void MainWindow::stop_run() {
  if (!controller_->running()) return;
  controller_->stop();
  statusBar()->showMessage(tr("Stopping: finished arms are kept"));
}

QString MainWindow::write_report_for_shown_run(QString* index_html) {
  const RunResults& shown = run_view_->shown();
  if (shown.dir.empty()) return tr("no run is shown: run an experiment or open a results folder first");
  try {
    const RunResults run = load_run(shown.dir);
    write_report(run, analysis::parse_formats("png,svg,md,html"));
    if (index_html)
      *index_html = QFileInfo(QString::fromStdString((run.dir / "report" / "index.html").string())).absoluteFilePath();
  } catch (const std::exception& e) {
    return QString::fromStdString(e.what());
  }
  return {};
}

QStringList MainWindow::recent_files() const { return QSettings().value("recent_files").toStringList(); }

void MainWindow::remember(const QString& path) {
  QSettings s;
  QStringList recent = s.value("recent_files").toStringList();
  const QString abs = QFileInfo(path).absoluteFilePath();
  recent.removeAll(abs);
  recent.prepend(abs);
  while (recent.size() > kMaxRecent) recent.removeLast();
  s.setValue("recent_files", recent);
  rebuild_recent_menu();
}

void MainWindow::rebuild_recent_menu() {
  recent_menu_->clear();
  const QStringList recent = recent_files();
  for (int i = 0; i < recent.size(); ++i) {
    const QString path = recent[i];
    QAction* a = recent_menu_->addAction(QString("&%1 %2").arg(i + 1).arg(QFileInfo(path).fileName()));
    a->setToolTip(path);
    connect(a, &QAction::triggered, this, [this, path] {
      const QString e = QFileInfo(path).isDir()   ? open_results(path)
                        : is_volume_file(path)    ? open_volume(path)
                        : confirm_discard()       ? open_spec(path)
                                                  : QString();
      if (!e.isEmpty()) warn(tr("Cannot open %1").arg(path), e);
    });
  }
  recent_menu_->setEnabled(!recent.isEmpty());
}

void MainWindow::show_tab(int index) { tabs_->setCurrentIndex(index); }

void MainWindow::update_title() {
  const QString file = editor_->path().isEmpty() ? tr("untitled") : QFileInfo(editor_->path()).fileName();
  setWindowTitle(QString("%1[*] — Quartet").arg(file));
  setWindowModified(editor_->modified());
}

void MainWindow::update_run_actions() {
  const bool running = controller_->running();
  if (QAction* a = action("run")) a->setEnabled(!running);
  if (QAction* a = action("stop")) a->setEnabled(running);
  if (QAction* a = action("resume")) a->setEnabled(!running && !resumable_run().isEmpty());
}

bool MainWindow::confirm_discard() {
  if (!editor_->modified() || qEnvironmentVariableIsSet("QUARTET_GUI_NO_DIALOGS")) return true;
  return QMessageBox::question(this, tr("Discard changes?"),
                               tr("The experiment has unsaved changes. Discard them?")) == QMessageBox::Yes;
}

void MainWindow::warn(const QString& title, const QString& message) {
  statusBar()->showMessage(message.section('\n', 0, 0));
  if (!qEnvironmentVariableIsSet("QUARTET_GUI_NO_DIALOGS")) QMessageBox::warning(this, title, message);
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (controller_->running() && !qEnvironmentVariableIsSet("QUARTET_GUI_NO_DIALOGS") &&
      QMessageBox::question(this, tr("Stop the run?"), tr("A run is in progress. Stop it and quit?")) != QMessageBox::Yes) {
    event->ignore();
    return;
  }
  if (!confirm_discard()) {
    event->ignore();
    return;
  }
  controller_->stop();
  QSettings s;
  s.setValue("window/geometry", saveGeometry());
  s.setValue("window/state", saveState());
  event->accept();
}

}  // namespace quartet::gui

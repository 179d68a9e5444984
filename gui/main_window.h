#pragma once

// quartet-gui's window: the experiment editor, the run view, the comparison and the
// volume slice viewer, with the menus, shortcuts, recent files and remembered settings
// of a desktop app.

#include <QMainWindow>
#include <QString>
#include <QStringList>

class QAction;
class QMenu;
class QTabWidget;

namespace quartet::gui {

class CompareView;
class RunController;
class RunView;
class SpecEditor;
class VolumeViewer;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);

  // Each returns the problem in words, or "" on success; the interactive actions show
  // it in a message box.
  QString open_spec(const QString& path);
  QString save_spec(const QString& path);
  QString open_results(const QString& dir);
  QString open_volume(const QString& path);  // a NIfTI image, in the slice viewer
  // What the command line names, each by what it is (a run folder, a volume, an
  // experiment); a problem is shown as the interactive actions show it, and returned.
  QStringList open_paths(const QStringList& paths);
  QString start_run();
  void stop_run();
  // Continues the run shown when it was stopped or failed (quartet run --resume); "" or
  // why not.
  QString resume_run();
  // The folder resume_run() would continue, or "".
  QString resumable_run() const;
  // Writes RUN_DIR/report/ for the run shown (as quartet report does).
  QString write_report_for_shown_run(QString* index_html = nullptr);

  QStringList recent_files() const;
  QString results_dir() const;  // where runs go: <results dir>/<name>-<time>
  void show_tab(int index);     // 0 editor, 1 run, 2 compare, 3 volumes
  // A menu action by its object name: new, open, save, save_as, open_results,
  // open_volume, open_mask, export_charts, quit, run, stop, report, guide, shortcuts, about.
  QAction* action(const QString& name) const;
  // Help's texts: the quick guide, and every menu shortcut with what it does.
  QString quick_guide() const;
  QString shortcuts_text() const;

  SpecEditor* editor() const { return editor_; }
  RunView* run_view() const { return run_view_; }
  CompareView* compare() const { return compare_; }
  RunController* controller() const { return controller_; }
  VolumeViewer* viewer() const { return viewer_; }

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void build_menus();
  void remember(const QString& path);
  void rebuild_recent_menu();
  void update_title();
  void update_run_actions();
  bool confirm_discard();
  void warn(const QString& title, const QString& message);

  SpecEditor* editor_;
  RunView* run_view_;
  CompareView* compare_;
  VolumeViewer* viewer_;
  RunController* controller_;
  QTabWidget* tabs_;
  QMenu* recent_menu_ = nullptr;
};

// A NIfTI file (.nii, .nii.gz): opened in the slice viewer.
bool is_volume_file(const QString& path);

}  // namespace quartet::gui

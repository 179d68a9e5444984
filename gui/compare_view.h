#pragma once

// Finished runs side by side: pick runs and their arms; the charts show the picked arms,
// each named "A: arm" (the run's letter in the list) when more than one run is open.
// Each arm shows the samples per second it measured; with a cluster profile chosen
// ("Predict on…"), the planner's prediction on it and the error beside them.

#include <QString>
#include <QWidget>
#include <filesystem>
#include <optional>
#include <vector>

#include "analysis/plan/cluster.h"
#include "analysis/results_model.h"

class QLabel;
class QTreeWidget;
class QTreeWidgetItem;

namespace quartet::gui {

class ChartPanel;

class CompareView : public QWidget {
  Q_OBJECT

 public:
  explicit CompareView(QWidget* parent = nullptr);

  // Opens a run folder with every arm picked; a folder already open is read again in its
  // place (a run that went on since, or a stopped run resumed), its picks kept. Returns the
  // error, shown in the view, when the folder cannot be read; the runs already open stay as
  // they were.
  std::optional<QString> add_run(const QString& dir);
  void add_run(analysis::RunResults run);
  // The open run of folder `dir`, or null.
  const analysis::RunResults* run_for(const QString& dir) const;
  void remove_selected_run();
  // Picks (or drops) one arm of the i-th run.
  void set_arm_checked(size_t run, const std::string& arm, bool checked);

  // The picked arms, labelled as the charts show them.
  std::vector<analysis::ArmResults> picked() const;
  const std::vector<analysis::RunResults>& runs() const { return runs_; }
  ChartPanel* charts() const { return charts_; }
  QString error_text() const;

  // Predicts every open arm on the profile in `file` (quartet calibrate's, or a shipped
  // one) and shows it beside the measurement. Returns the error, shown in the view, when
  // the file is no profile; the columns stay as they were.
  std::optional<QString> set_cluster(const QString& file);
  void clear_cluster();
  // The arm's row of the prediction table: measured samples/s, predicted, error ("" where
  // none); empty without a profile.
  QStringList arm_figures(size_t run, const std::string& arm) const;

 signals:
  void run_opened(const QString& dir);

 private:
  void update_charts();
  void relabel();
  void fill_item(QTreeWidgetItem* top, const analysis::RunResults& run, const QStringList& unpicked);
  // The index of the open run in the same folder as `dir`, or -1.
  int index_of(const std::filesystem::path& dir) const;

  void show_error(const QString& message);
  void fill_predictions();

  std::vector<analysis::RunResults> runs_;
  std::optional<analysis::plan::ClusterProfile> cluster_;
  QTreeWidget* tree_;
  QTreeWidget* predicted_;
  QLabel* cluster_label_;
  QLabel* error_;
  ChartPanel* charts_;
  bool updating_ = false;
};

// "A", "B", …: how the comparison names its i-th run.
std::string run_letter(size_t index);

}  // namespace quartet::gui

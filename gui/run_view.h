#pragma once

// A run as it goes: a progress bar per arm, the errors, the runner's log, and the live
// charts, refreshed on a timer from the stream's latest snapshot. Also shows a finished
// run folder the same way.

#include <QString>
#include <QWidget>
#include <map>
#include <string>

#include "analysis/results_model.h"

class QGridLayout;
class QLabel;
class QPlainTextEdit;
class QProgressBar;
class QTimer;

namespace quartet::gui {

class ChartPanel;
class RunController;

class RunView : public QWidget {
  Q_OBJECT

 public:
  explicit RunView(RunController* controller, QWidget* parent = nullptr);

  // Shows a finished (or interrupted) run folder, until the next run starts.
  void show_results(const analysis::RunResults& run);
  // Redraws from the controller's stream when it changed (the timer calls this).
  void refresh();

  ChartPanel* charts() const { return charts_; }
  QString error_text() const;
  QString status_text() const;
  QProgressBar* progress(const std::string& arm) const;
  // The line under an arm's bar: its status, figures, elapsed time and ETA.
  QString detail(const std::string& arm) const;
  const analysis::RunResults& shown() const { return shown_; }

 private:
  void show_snapshot(const analysis::RunResults& run, const QString& errors, const QString& log);
  void rebuild_arms(const analysis::RunResults& run);

  RunController* controller_;
  QLabel* title_;
  QLabel* status_;
  QLabel* error_;
  QGridLayout* arms_grid_;
  QWidget* arms_box_;
  QPlainTextEdit* log_;
  ChartPanel* charts_;
  QTimer* timer_;
  struct ArmRow {
    QLabel* name;
    QProgressBar* bar;
    QLabel* detail;
  };
  std::map<std::string, ArmRow> rows_;
  std::vector<std::string> row_order_;
  analysis::RunResults shown_;
  bool live_ = false;  // showing the controller's run, not a folder
  uint64_t drawn_version_ = ~uint64_t{0};
  qsizetype drawn_log_ = -1;
  bool drawn_running_ = false;
};

}  // namespace quartet::gui

#pragma once

// Every chart of a set of arms, in tabs (an overview of four, then each chart alone),
// refreshed in place from a snapshot; the same charts the report renders.

#include <QString>
#include <QWidget>
#include <vector>

#include "analysis/results_model.h"
#include "gui/charts.h"

class QChartView;
class QTabWidget;

namespace quartet::gui {

class ChartPanel : public QWidget {
  Q_OBJECT

 public:
  explicit ChartPanel(QWidget* parent = nullptr);

  // Refreshes every chart from `arms` (their labels name them).
  void show_arms(const std::vector<analysis::ArmResults>& arms);
  const std::vector<analysis::ArmResults>& arms() const { return arms_; }
  // The single-chart tab's chart of `kind`.
  QChart* chart(ChartKind kind) const;
  QTabWidget* tabs() const { return tabs_; }

  // Writes every chart as <dir>/<id>.png and/or .svg; returns the files. Throws
  // std::runtime_error naming a file it cannot write.
  QStringList export_to(const QString& dir, bool png, bool svg) const;

 private:
  struct View {
    ChartKind kind;
    QChartView* view;
  };
  std::vector<View> views_;
  std::vector<analysis::ArmResults> arms_;
  QTabWidget* tabs_;
};

}  // namespace quartet::gui

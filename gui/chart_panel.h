#pragma once

// Every chart of a set of arms, in tabs (an overview of four, then each chart alone),
// refreshed in place from a snapshot; the same charts the report renders. Above them the
// loss's smoothing and log scale; each chart reads out the point under the mouse and
// zooms where it is dragged (gui/chart_view.h).

#include <QString>
#include <QWidget>
#include <vector>

#include "analysis/results_model.h"
#include "gui/chart_view.h"
#include "gui/charts.h"

class QCheckBox;
class QLabel;
class QSlider;
class QTabWidget;

namespace quartet::gui {

class ChartPanel : public QWidget {
  Q_OBJECT

 public:
  explicit ChartPanel(QWidget* parent = nullptr);

  // Refreshes every chart from `arms` (their labels name them).
  void show_arms(const std::vector<analysis::ArmResults>& arms);
  const std::vector<analysis::ArmResults>& arms() const { return arms_; }
  // The single-chart tab's chart of `kind`, and its view.
  QChart* chart(ChartKind kind) const;
  ChartView* view(ChartKind kind) const;
  // Every view, the Overview's first.
  std::vector<ChartView*> views() const;
  QTabWidget* tabs() const { return tabs_; }

  // The loss's smoothing weight (0 … 0.99; 0.8 to start) and log scale, as
  // the controls above the charts set them.
  void set_smoothing(double weight);
  void set_log_loss(bool log);
  QSlider* smoothing_slider() const { return smoothing_; }

  // Writes every chart as <dir>/<id>.png and/or .svg; returns the files. Throws
  // std::runtime_error naming a file it cannot write.
  QStringList export_to(const QString& dir, bool png, bool svg) const;

 private:
  struct View {
    ChartKind kind;
    ChartView* view;
  };
  ChartView* new_view(ChartKind kind, QWidget* parent);
  // Fills one view from arms_, keeping a zoomed view's ranges.
  void refill(const View& v);

  std::vector<View> views_;
  std::vector<analysis::ArmResults> arms_;
  QTabWidget* tabs_;
  QSlider* smoothing_;
  QLabel* smoothing_value_;
  QCheckBox* log_loss_;
};

}  // namespace quartet::gui

#pragma once

// A chart as the app shows it, to explore as TensorBoard's are: the mouse over it reads
// out the nearest point (its arm, x and y) or the bar under it; a drag with the left
// button zooms into the rectangle drawn, a right click or a double click goes back to the
// whole chart.

#include <QChartView>
#include <QString>
#include <functional>
#include <optional>

class QGraphicsEllipseItem;
class QGraphicsSimpleTextItem;
class QGraphicsRectItem;

namespace quartet::gui {

class ChartView : public QChartView {
  Q_OBJECT

 public:
  explicit ChartView(QChart* chart, QWidget* parent = nullptr);

  struct Readout {
    QString series;  // the arm's line, or the bar's arm
    double x = 0.0, y = 0.0;
    QString text;    // as the view shows it: "single: 12032 samples, accuracy 0.8123"
  };
  // What the view reads out at `pos` (in its own coordinates): the nearest point of a
  // line or scatter series shown within `radius` pixels, or the bar under it; none off
  // the chart's data.
  std::optional<Readout> readout_at(QPointF pos, double radius = 30.0) const;
  // The readout shown now, "" when none.
  QString shown_readout() const { return shown_; }

  // Back to the whole chart: `refill` (set by the owner) draws it again from its data,
  // which sets its ranges.
  void reset_zoom();
  bool zoomed() const { return zoomed_; }
  void set_refill(std::function<void()> refill) { refill_ = std::move(refill); }
  // Called after each fill: zoom by dragging only where there are lines; the labels fitted.
  void chart_filled();
  // Bar categories and legend entries in a font small enough that none is cut where the
  // view is small (down to 6.5 pt); the chart's own font where there is room.
  void fit_labels();

 protected:
  void resizeEvent(QResizeEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;

 private:
  void show_readout(QPointF pos);
  void hide_readout();

  QGraphicsEllipseItem* dot_ = nullptr;
  QGraphicsRectItem* box_ = nullptr;
  QGraphicsSimpleTextItem* label_ = nullptr;
  QString shown_;
  bool zoomed_ = false;
  std::function<void()> refill_;
};

}  // namespace quartet::gui

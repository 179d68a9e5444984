#include "gui/chart_view.h"

#include <QAbstractAxis>
#include <QAbstractBarSeries>
#include <QBarCategoryAxis>
#include <QBarSet>
#include <QCategoryAxis>
#include <QGraphicsEllipseItem>
#include <QGraphicsRectItem>
#include <QGraphicsSimpleTextItem>
#include <QFontMetricsF>
#include <QLegend>
#include <QLegendMarker>
#include <QMouseEvent>
#include <QTimer>
#include <QXYSeries>
#include <cmath>
#include <limits>

namespace quartet::gui {

namespace {

// A number as an axis reads: whole above 100, else four significant figures.
QString number_text(double v) { return std::abs(v) >= 100.0 ? QString::number(v, 'f', 0) : QString::number(v, 'g', 4); }

QString axis_title(QChart* chart, Qt::Orientation side) {
  const QList<QAbstractAxis*> axes = chart->axes(side);
  return axes.isEmpty() ? QString() : axes.front()->titleText();
}

// A bar's category label on one line: "A: single · 1234/s".
QString category_text(QString category) { return category.replace("<br>", " · "); }

}  // namespace

ChartView::ChartView(QChart* chart, QWidget* parent) : QChartView(chart, parent) {
  setRenderHint(QPainter::Antialiasing);
  setMouseTracking(true);
  setToolTip(tr("Drag to zoom; right-click or double-click to see it all"));
  chart_filled();
}

std::optional<ChartView::Readout> ChartView::readout_at(QPointF pos, double radius) const {
  QChart* c = chart();
  const QPointF at = c->mapFromScene(mapToScene(pos.toPoint()));
  if (!c->plotArea().contains(at)) return std::nullopt;
  std::optional<Readout> best;
  double best_d = radius;
  for (QAbstractSeries* s : c->series()) {
    if (!s->isVisible()) continue;
    if (auto* xy = qobject_cast<QXYSeries*>(s)) {
      for (const QPointF& p : xy->points()) {
        const QPointF there = c->mapToPosition(p, xy);
        const double d = std::hypot(there.x() - at.x(), there.y() - at.y());
        if (d < best_d) {
          best_d = d;
          best = Readout{xy->name(), p.x(), p.y(), {}};
        }
      }
    }
  }
  if (best) {
    best->text = QString("%1: %2 %3, %4 %5")
                     .arg(best->series, number_text(best->x), axis_title(c, Qt::Horizontal), axis_title(c, Qt::Vertical),
                          number_text(best->y));
    return best;
  }
  // Bars: the category under the mouse, and the set whose bar stands there.
  for (QAbstractSeries* s : c->series()) {
    auto* bars = qobject_cast<QAbstractBarSeries*>(s);
    if (!bars || !s->isVisible()) continue;
    const bool horizontal = bars->type() == QAbstractSeries::SeriesTypeHorizontalBar ||
                            bars->type() == QAbstractSeries::SeriesTypeHorizontalStackedBar ||
                            bars->type() == QAbstractSeries::SeriesTypeHorizontalPercentBar;
    const QPointF v = c->mapToValue(at, bars);
    const int category = static_cast<int>(std::lround(horizontal ? v.y() : v.x()));
    QStringList categories;
    for (QAbstractAxis* a : bars->attachedAxes())
      if (auto* ca = qobject_cast<QBarCategoryAxis*>(a)) categories = ca->categories();
    if (category < 0 || category >= categories.size()) continue;
    QStringList parts;
    for (QBarSet* set : bars->barSets())
      if (category < set->count() && set->at(category) != 0.0) {
        if (categories[category].contains(set->label())) continue;  // the category names it already
        parts << QString("%1 %2").arg(set->label(), number_text(set->at(category)));
      }
    Readout r{categories[category], static_cast<double>(category), 0.0, category_text(categories[category])};
    if (!parts.isEmpty())
      r.text += ": " + parts.join(", ") + " " + axis_title(c, horizontal ? Qt::Horizontal : Qt::Vertical);
    return r;
  }
  return std::nullopt;
}

void ChartView::show_readout(QPointF pos) {
  const std::optional<Readout> r = readout_at(pos);
  if (!r) return hide_readout();
  if (!label_) {
    dot_ = new QGraphicsEllipseItem;
    dot_->setPen(QPen(Qt::black, 1.5));
    dot_->setBrush(Qt::NoBrush);
    box_ = new QGraphicsRectItem;
    box_->setPen(QPen(QColor(120, 120, 120)));
    box_->setBrush(QColor(255, 255, 255, 235));
    label_ = new QGraphicsSimpleTextItem;
    for (QGraphicsItem* item : std::initializer_list<QGraphicsItem*>{dot_, box_, label_}) {
      item->setZValue(1000);
      scene()->addItem(item);
    }
  }
  shown_ = r->text;
  label_->setText(r->text);
  const QPointF scene_pos = mapToScene(pos.toPoint());
  bool on_point = false;
  for (QAbstractSeries* s : chart()->series())
    if (auto* xy = qobject_cast<QXYSeries*>(s); xy && xy->name() == r->series) {
      const QPointF p = chart()->mapToScene(chart()->mapToPosition(QPointF(r->x, r->y), xy));
      dot_->setRect(p.x() - 5, p.y() - 5, 10, 10);
      on_point = true;
      break;
    }
  dot_->setVisible(on_point);
  // The label beside the mouse, kept inside the view.
  const QRectF text = label_->boundingRect();
  QPointF corner = scene_pos + QPointF(14, -text.height() - 10);
  const QRectF room = mapToScene(viewport()->rect()).boundingRect();
  if (corner.x() + text.width() + 8 > room.right()) corner.setX(scene_pos.x() - text.width() - 18);
  if (corner.y() < room.top()) corner.setY(scene_pos.y() + 14);
  label_->setPos(corner);
  box_->setRect(QRectF(corner, text.size()).adjusted(-4, -2, 4, 2));
  for (QGraphicsItem* item : std::initializer_list<QGraphicsItem*>{box_, label_}) item->setVisible(true);
}

void ChartView::hide_readout() {
  shown_.clear();
  if (!label_) return;
  for (QGraphicsItem* item : std::initializer_list<QGraphicsItem*>{dot_, box_, label_}) item->setVisible(false);
}

void ChartView::mouseMoveEvent(QMouseEvent* event) {
  QChartView::mouseMoveEvent(event);
  if (event->buttons() == Qt::NoButton) show_readout(event->position());
}

void ChartView::mouseReleaseEvent(QMouseEvent* event) {
  if (event->button() == Qt::RightButton) {
    reset_zoom();
    event->accept();
    return;
  }
  const bool dragging = rubberBand() != QChartView::NoRubberBand && event->button() == Qt::LeftButton;
  QChartView::mouseReleaseEvent(event);
  if (dragging && chart()->isZoomed()) zoomed_ = true;
}

void ChartView::mouseDoubleClickEvent(QMouseEvent* event) {
  reset_zoom();
  event->accept();
}

void ChartView::leaveEvent(QEvent* event) {
  hide_readout();
  QChartView::leaveEvent(event);
}

void ChartView::reset_zoom() {
  zoomed_ = false;
  chart()->zoomReset();
  if (refill_) refill_();
}

void ChartView::chart_filled() {
  bool lines = false;
  for (QAbstractSeries* s : chart()->series()) lines = lines || qobject_cast<QXYSeries*>(s) != nullptr;
  setRubberBand(lines ? QChartView::RectangleRubberBand : QChartView::NoRubberBand);
  fit_labels();
}

void ChartView::resizeEvent(QResizeEvent* event) {
  QChartView::resizeEvent(event);
  // After the chart's layout has taken the new size.
  QTimer::singleShot(0, this, &ChartView::fit_labels);
}

void ChartView::fit_labels() {
  QChart* c = chart();
  const QRectF plot = c->plotArea();
  if (plot.width() < 10 || plot.height() < 10) return;
  constexpr double kSmallest = 6.5;
  const QFont base = font();
  // The largest size from the base down at which `fits` holds; none when not even the
  // smallest does.
  auto fitted = [&](const std::function<bool(const QFontMetricsF&)>& fits) -> std::optional<QFont> {
    QFont f = base;
    for (double pt = base.pointSizeF(); pt >= kSmallest; pt -= 0.5) {
      f.setPointSizeF(pt);
      if (fits(QFontMetricsF(f))) return f;
    }
    return std::nullopt;
  };
  for (QAbstractAxis* axis : c->axes()) {
    // Qt cuts a label to "…" unless it fits its share of the axis: the plot's length over
    // the labels and two more (bars), or one more (labels on values), less its padding.
    QStringList labels;
    int more = 2;
    if (auto* bars = qobject_cast<QBarCategoryAxis*>(axis)) labels = bars->categories();
    if (auto* values = qobject_cast<QCategoryAxis*>(axis)) labels = values->categoriesLabels(), more = 1;
    if (labels.isEmpty()) continue;
    const double length = axis->orientation() == Qt::Horizontal ? plot.width() : plot.height();
    // Whether every label fits `room` pixels along the axis.
    auto fits_in = [&](double room) {
      return [&labels, &axis, room](const QFontMetricsF& m) {
        for (const QString& label : labels) {
          const QStringList lines = label.split("<br>");
          if (axis->orientation() == Qt::Vertical && lines.size() * m.lineSpacing() + 4.0 > room) return false;
          if (axis->orientation() == Qt::Horizontal)
            for (const QString& line : lines)
              if (m.horizontalAdvance(line) + 4.0 > room) return false;
        }
        return true;
      };
    };
    std::optional<QFont> f = fitted(fits_in(length / (labels.size() + more) - 6.0));
    // Qt's own test is a little kinder than that share: the smallest size, where each label
    // still fits its category.
    QFont smallest = base;
    smallest.setPointSizeF(kSmallest);
    if (!f && fits_in(length / labels.size() - 6.0)(QFontMetricsF(smallest))) f = smallest;
    // Too many to name in this view: none rather than "…" each (the mouse reads them out,
    // the chart's own tab has the room).
    if (axis->labelsVisible() != f.has_value()) axis->setLabelsVisible(f.has_value());
    if (f && axis->labelsFont() != *f) axis->setLabelsFont(*f);
  }
  // A legend beside the chart may take a third of its width; under it, its whole width.
  QLegend* legend = c->legend();
  if (!legend->isVisible()) return;
  QStringList entries;
  for (QLegendMarker* m : legend->markers())
    if (m->isVisible()) entries << m->label();
  if (entries.isEmpty()) return;
  const bool beside = legend->alignment() & (Qt::AlignLeft | Qt::AlignRight);
  const double width = c->size().width();
  const std::optional<QFont> f = fitted([&](const QFontMetricsF& m) {
    const double marker = m.height() * 2.2;  // the marker and its spacing
    if (beside) {
      for (const QString& e : entries)
        if (m.horizontalAdvance(e) + marker > width / 3.0) return false;
      return entries.size() * m.height() * 1.4 < c->size().height() * 0.9;
    }
    double total = 0.0;
    for (const QString& e : entries) total += m.horizontalAdvance(e) + marker;
    return total < width * 0.95;
  });
  QFont smallest = base;
  smallest.setPointSizeF(kSmallest);
  if (legend->font() != f.value_or(smallest)) legend->setFont(f.value_or(smallest));  // Qt cuts what still does not fit
}

}  // namespace quartet::gui

#include "gui/chart_render.h"

#include <QChartView>
#include <QPainter>
#include <QSvgGenerator>
#include <memory>
#include <stdexcept>

namespace quartet::gui {

namespace {

std::unique_ptr<QChartView> view_of(QChart* chart, QSize size) {
  auto view = std::make_unique<QChartView>(chart);  // the view owns the chart
  view->setRenderHint(QPainter::Antialiasing);
  view->setAttribute(Qt::WA_DontShowOnScreen);
  view->resize(size);
  chart->resize(size);
  return view;
}

}  // namespace

QImage render_chart(QChart* chart, QSize size) {
  auto view = view_of(chart, size);
  return view->grab().toImage();
}

void save_chart_png(QChart* chart, const QString& path, QSize size) {
  const QImage image = render_chart(chart, size);
  if (!image.save(path, "PNG")) throw std::runtime_error(path.toStdString() + ": cannot write the PNG");
}

void save_chart_svg(QChart* chart, const QString& path, QSize size) {
  auto view = view_of(chart, size);
  QSvgGenerator svg;
  svg.setFileName(path);
  svg.setSize(size);
  svg.setViewBox(QRect(QPoint(0, 0), size));
  svg.setTitle(chart->title());
  QPainter painter;
  if (!painter.begin(&svg)) throw std::runtime_error(path.toStdString() + ": cannot write the SVG");
  view->render(&painter);
  painter.end();
}

}  // namespace quartet::gui

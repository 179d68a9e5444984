#pragma once

// Charts to image files, without a window: the report renders through the same
// QChartView the app shows (QT_QPA_PLATFORM=offscreen needs no display).

#include <QChart>
#include <QImage>
#include <QSize>
#include <QString>

namespace quartet::gui {

inline constexpr QSize kReportChartSize{960, 560};

// Takes ownership of `chart`. Requires a QApplication. Throws std::runtime_error naming
// the file when it cannot be written.
QImage render_chart(QChart* chart, QSize size = kReportChartSize);
void save_chart_png(QChart* chart, const QString& path, QSize size = kReportChartSize);
void save_chart_svg(QChart* chart, const QString& path, QSize size = kReportChartSize);

}  // namespace quartet::gui

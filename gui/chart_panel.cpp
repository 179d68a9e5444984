#include "gui/chart_panel.h"

#include <QChartView>
#include <QDir>
#include <QGridLayout>
#include <QTabWidget>
#include <QVBoxLayout>

#include "gui/chart_render.h"

namespace quartet::gui {

using analysis::ArmResults;

namespace {

QChartView* new_view(ChartKind kind, QWidget* parent) {
  auto* view = new QChartView(make_chart(kind, {}), parent);
  view->setRenderHint(QPainter::Antialiasing);
  view->setMinimumSize(320, 220);
  return view;
}

}  // namespace

ChartPanel::ChartPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  tabs_ = new QTabWidget(this);
  layout->addWidget(tabs_);
  auto* overview = new QWidget;
  auto* grid = new QGridLayout(overview);
  // The loss has points from the first step on, before any evaluation.
  const ChartKind four[] = {ChartKind::loss, ChartKind::quality_wall, ChartKind::throughput, ChartKind::memory};
  for (int i = 0; i < 4; ++i) {
    QChartView* v = new_view(four[i], overview);
    grid->addWidget(v, i / 2, i % 2);
    views_.push_back({four[i], v});
  }
  tabs_->addTab(overview, tr("Overview"));
  for (const ChartInfo& info : chart_kinds()) {
    QChartView* v = new_view(info.kind, nullptr);
    tabs_->addTab(v, QString::fromUtf8(info.title));
    tabs_->setTabToolTip(tabs_->count() - 1, QString::fromUtf8(info.title));
    views_.push_back({info.kind, v});
  }
  // Short tab names; the chart's own title says the rest.
  const QStringList names = {tr("Throughput"), tr("Quality / time"), tr("Quality / samples"), tr("Loss"),
                             tr("Memory"),     tr("Communication"),  tr("Bytes over time"),   tr("Projection")};
  for (int i = 0; i < names.size() && i + 1 < tabs_->count(); ++i) tabs_->setTabText(i + 1, names[i]);
}

void ChartPanel::show_arms(const std::vector<ArmResults>& arms) {
  arms_ = arms;
  for (const View& v : views_) fill_chart(v.view->chart(), v.kind, arms_);
}

QChart* ChartPanel::chart(ChartKind kind) const {
  for (auto it = views_.rbegin(); it != views_.rend(); ++it)
    if (it->kind == kind) return it->view->chart();
  return nullptr;
}

QStringList ChartPanel::export_to(const QString& dir, bool png, bool svg) const {
  QDir().mkpath(dir);
  QStringList written;
  for (const ChartInfo& info : chart_kinds()) {
    const QString stem = QDir(dir).filePath(QString::fromUtf8(info.id));
    if (png) {
      save_chart_png(make_chart(info.kind, arms_), stem + ".png");
      written << stem + ".png";
    }
    if (svg) {
      save_chart_svg(make_chart(info.kind, arms_), stem + ".svg");
      written << stem + ".svg";
    }
  }
  return written;
}

}  // namespace quartet::gui

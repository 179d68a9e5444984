#include "gui/chart_panel.h"

#include <QCheckBox>
#include <QDir>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSlider>
#include <QTabWidget>
#include <QVBoxLayout>
#include <QValueAxis>

#include "gui/chart_render.h"

namespace quartet::gui {

using analysis::ArmResults;

ChartView* ChartPanel::new_view(ChartKind kind, QWidget* parent) {
  QChart* chart = make_chart(kind, {});
  // The app's charts give the plot the room: narrow margins, a smaller title.
  chart->setMargins(QMargins(4, 4, 4, 4));
  QFont title = chart->titleFont();
  title.setPointSizeF(title.pointSizeF() * 0.9);
  chart->setTitleFont(title);
  auto* view = new ChartView(chart, parent);
  view->setMinimumSize(300, 200);
  return view;
}

ChartPanel::ChartPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  auto* controls = new QHBoxLayout;
  controls->setContentsMargins(4, 0, 4, 0);
  smoothing_ = new QSlider(Qt::Horizontal, this);
  smoothing_->setRange(0, 99);
  smoothing_->setValue(static_cast<int>(kDefaultSmoothing * 100.0));
  smoothing_->setMaximumWidth(160);
  smoothing_->setToolTip(tr("The loss as an exponential moving average (as TensorBoard smooths it); the raw loss is "
                            "drawn pale beneath. 0: raw"));
  smoothing_value_ = new QLabel(this);
  log_loss_ = new QCheckBox(tr("Log-scale loss"), this);
  auto* reset = new QPushButton(tr("Reset zoom"), this);
  reset->setToolTip(tr("Drag over a chart to zoom into it; right-click or double-click it to see it all"));
  controls->addWidget(new QLabel(tr("Loss smoothing"), this));
  controls->addWidget(smoothing_);
  controls->addWidget(smoothing_value_);
  controls->addSpacing(12);
  controls->addWidget(log_loss_);
  controls->addStretch(1);
  controls->addWidget(reset);
  layout->addLayout(controls);
  tabs_ = new QTabWidget(this);
  layout->addWidget(tabs_, 1);
  auto* overview = new QWidget;
  auto* grid = new QGridLayout(overview);
  grid->setContentsMargins(0, 0, 0, 0);
  grid->setSpacing(2);
  // The loss has points from the first step on, before any evaluation.
  const ChartKind four[] = {ChartKind::loss, ChartKind::quality_wall, ChartKind::throughput, ChartKind::memory};
  for (int i = 0; i < 4; ++i) {
    ChartView* v = new_view(four[i], overview);
    grid->addWidget(v, i / 2, i % 2);
    views_.push_back({four[i], v});
  }
  tabs_->addTab(overview, tr("Overview"));
  for (const ChartInfo& info : chart_kinds()) {
    ChartView* v = new_view(info.kind, nullptr);
    tabs_->addTab(v, QString::fromUtf8(info.title));
    tabs_->setTabToolTip(tabs_->count() - 1, QString::fromUtf8(info.title));
    views_.push_back({info.kind, v});
  }
  for (const View& v : views_) v.view->set_refill([this, v] { refill(v); });
  // Short tab names; the chart's own title says the rest.
  const QStringList names = {tr("Throughput"), tr("Quality / time"), tr("Quality / samples"), tr("Loss"),
                             tr("Memory"),     tr("Communication"),  tr("Bytes over time"),   tr("Projection")};
  for (int i = 0; i < names.size() && i + 1 < tabs_->count(); ++i) tabs_->setTabText(i + 1, names[i]);

  connect(smoothing_, &QSlider::valueChanged, this, [this](int v) { set_smoothing(v / 100.0); });
  connect(log_loss_, &QCheckBox::toggled, this, &ChartPanel::set_log_loss);
  connect(reset, &QPushButton::clicked, this, [this] {
    for (const View& v : views_) v.view->reset_zoom();
  });
  set_smoothing(kDefaultSmoothing);
}

void ChartPanel::set_smoothing(double weight) {
  smoothing_value_->setText(QString::number(weight, 'f', 2));
  if (smoothing_->value() != static_cast<int>(std::lround(weight * 100.0)))
    smoothing_->setValue(static_cast<int>(std::lround(weight * 100.0)));
  for (const View& v : views_)
    if (v.kind == ChartKind::loss) {
      v.view->chart()->setProperty(kSmoothingProperty, weight);
      refill(v);
    }
}

void ChartPanel::set_log_loss(bool log) {
  if (log_loss_->isChecked() != log) log_loss_->setChecked(log);
  for (const View& v : views_)
    if (v.kind == ChartKind::loss) {
      v.view->chart()->setProperty(kLogYProperty, log);
      v.view->reset_zoom();  // the old ranges mean nothing on the new scale
    }
}

void ChartPanel::refill(const View& v) {
  QChart* chart = v.view->chart();
  // A zoomed view keeps its ranges while the data grows under it.
  std::vector<std::pair<QValueAxis*, std::pair<double, double>>> ranges;
  auto axis_of = [chart](Qt::Orientation side) {
    const QList<QAbstractAxis*> axes = chart->axes(side);
    return axes.isEmpty() ? nullptr : qobject_cast<QValueAxis*>(axes.front());
  };
  if (v.view->zoomed())
    for (Qt::Orientation side : {Qt::Horizontal, Qt::Vertical})
      if (QValueAxis* a = axis_of(side)) ranges.push_back({a, {a->min(), a->max()}});
  fill_chart(chart, v.kind, arms_);
  for (const auto& [axis, range] : ranges)
    for (Qt::Orientation side : {Qt::Horizontal, Qt::Vertical})
      if (axis_of(side) == axis) axis->setRange(range.first, range.second);
  v.view->chart_filled();
}

void ChartPanel::show_arms(const std::vector<ArmResults>& arms) {
  arms_ = arms;
  for (const View& v : views_) refill(v);
}

QChart* ChartPanel::chart(ChartKind kind) const {
  ChartView* v = view(kind);
  return v ? v->chart() : nullptr;
}

ChartView* ChartPanel::view(ChartKind kind) const {
  for (auto it = views_.rbegin(); it != views_.rend(); ++it)
    if (it->kind == kind) return it->view;
  return nullptr;
}

std::vector<ChartView*> ChartPanel::views() const {
  std::vector<ChartView*> out;
  for (const View& v : views_) out.push_back(v.view);
  return out;
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

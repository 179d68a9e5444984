#include "gui/run_view.h"

#include <QGridLayout>
#include <QGroupBox>
#include <QLabel>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QSplitter>
#include <QTimer>
#include <QVBoxLayout>

#include "analysis/repeats.h"
#include "analysis/tables.h"
#include "gui/chart_panel.h"
#include "gui/charts.h"
#include "gui/run_controller.h"
#include "gui/tone.h"

namespace quartet::gui {

using analysis::ArmResults;
using analysis::EvalPoint;
using analysis::RunResults;

RunView::RunView(RunController* controller, QWidget* parent) : QWidget(parent), controller_(controller) {
  auto* layout = new QVBoxLayout(this);
  title_ = new QLabel(tr("No run yet: edit an experiment and press Run (F5), or open a results folder."), this);
  title_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  QFont big = title_->font();
  big.setBold(true);
  title_->setFont(big);
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  error_ = new QLabel(this);
  set_text_tone(error_, Tone::error);
  error_->setWordWrap(true);
  error_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  error_->hide();
  arms_box_ = new QGroupBox(tr("Arms"), this);
  arms_grid_ = new QGridLayout(arms_box_);
  arms_grid_->setColumnStretch(1, 1);
  arms_grid_->setAlignment(Qt::AlignTop);
  layout->addWidget(title_);
  layout->addWidget(status_);
  layout->addWidget(error_);
  // The arms over the runner's log in a column beside the charts: the charts keep the
  // window's whole height (a bar chart needs it for its labels at 1280×720).
  auto* side = new QSplitter(Qt::Vertical, this);
  log_ = new QPlainTextEdit(side);
  log_->setReadOnly(true);
  log_->setPlaceholderText(tr("The runner's messages appear here."));
  log_->setMaximumBlockCount(2000);
  side->addWidget(arms_box_);
  side->addWidget(log_);
  side->setStretchFactor(0, 0);
  side->setStretchFactor(1, 1);
  arms_box_->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Minimum);  // never squeezed: the log gives way
  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(side);
  charts_ = new ChartPanel(split);
  split->addWidget(charts_);
  split->setStretchFactor(0, 0);
  split->setStretchFactor(1, 1);
  split->setCollapsible(1, false);
  split->setSizes({360, 920});
  layout->addWidget(split, 1);

  // Charts refresh from snapshots on a timer, never from the reader directly.
  timer_ = new QTimer(this);
  timer_->setInterval(500);
  connect(timer_, &QTimer::timeout, this, &RunView::refresh);
  timer_->start();
  if (controller_) {
    connect(controller_, &RunController::started, this, [this] {
      live_ = true;
      drawn_version_ = ~uint64_t{0};
      refresh();
    });
    connect(controller_, &RunController::finished, this, [this] {
      live_ = true;
      drawn_version_ = ~uint64_t{0};
      refresh();
    });
  }
}

namespace {

// A run with repeats that has ended, as its folder holds it: the stream holds each arm's
// last repeat, while the folder keeps every repeat and has each arm's figures over them.
// Any other run, or one whose folder cannot be read, as it is.
RunResults read_back_repeats(RunResults run) {
  std::error_code ec;
  if (run.dir.empty() || !std::filesystem::exists(analysis::repeat_dir(run.dir, 2) / "spec.json", ec)) return run;
  try {
    return analysis::load_run(run.dir);
  } catch (const analysis::ResultsError&) {
    return run;
  }
}

// An arm's throughput and final quality over its repeats, as the report gives them
// (" · samples/s 1234 ± 56 (n = 3) · final quality …"), or "" without repeats.
QString over_repeats(const ArmResults& arm) {
  QString text;
  for (const analysis::RepeatMetric& m : analysis::repeat_metrics())
    if (m.key == "samples_per_second" || m.key == "final_quality")
      if (const std::optional<analysis::Interval> i = analysis::repeat_interval(arm, m.key))
        text += QString::fromStdString(" · " + m.label + " " + analysis::interval_text(*i, m.format));
  return text;
}

// "0:42 elapsed, ETA 1:10" for a running arm, "1:52" for one that ended; "" before its
// first record. Times at its last record, as the terminal's bar gives them.
QString elapsed_and_eta(const ArmResults& arm) {
  const double elapsed = analysis::wall_seconds(arm);
  if (!(elapsed > 0)) return {};
  const QString spent = QString::fromStdString(analysis::format_seconds(elapsed));
  if (arm.status != "running") return spent;
  const double done = arm_progress(arm);
  if (!(done > 0)) return QObject::tr("%1 elapsed").arg(spent);
  return QObject::tr("%1 elapsed, ETA %2")
      .arg(spent, QString::fromStdString(analysis::format_seconds(elapsed * (1.0 - done) / done)));
}

}  // namespace

void RunView::refresh() {
  if (!controller_ || !live_) return;
  const RunStream& s = controller_->stream();
  const QString log = controller_->stderr_text();
  const bool running = controller_->running();
  if (s.version() == drawn_version_ && log.size() == drawn_log_ && running == drawn_running_) return;
  drawn_version_ = s.version();
  drawn_log_ = log.size();
  drawn_running_ = running;
  RunResults run = s.snapshot();
  if (run.dir.empty()) run.dir = controller_->out_dir().toStdString();
  if (!running) {
    settle(run, controller_->exit_code());
    run = read_back_repeats(std::move(run));
  }
  QString errors = controller_->running() ? QString() : controller_->error();
  if (controller_->running())
    for (const std::string& e : s.errors()) errors += (errors.isEmpty() ? "" : "\n") + QString::fromStdString(e);
  show_snapshot(run, errors, log);
  if (!running && controller_->stopped())
    status_->setText(status_->text() + tr(" — stopped as asked; the arms that finished are kept, and Run › Resume "
                                          "(F6) continues with the rest"));
}

void RunView::show_results(const RunResults& run) {
  live_ = false;
  QString errors;
  for (const ArmResults& a : run.arms)
    if (!a.error.empty()) errors += (errors.isEmpty() ? "" : "\n") + QString::fromStdString(a.name + ": " + a.error);
  for (const std::string& w : run.warnings) errors += (errors.isEmpty() ? "" : "\n") + QString::fromStdString(w);
  show_snapshot(run, errors, QString());
}

void RunView::show_snapshot(const RunResults& run, const QString& errors, const QString& log) {
  shown_ = run;
  title_->setText(QString::fromStdString(run.name.empty() ? "run" : run.name) +
                  (run.dir.empty() ? QString() : QString("  —  %1").arg(QString::fromStdString(run.dir.string()))));
  status_->setText(tr("Status: %1").arg(QString::fromStdString(run.status)));
  error_->setText(errors);
  error_->setVisible(!errors.isEmpty());
  if (log_->toPlainText() != log) log_->setPlainText(log);
  rebuild_arms(run);
  for (const ArmResults& a : run.arms) {
    auto it = rows_.find(a.name);
    if (it == rows_.end()) continue;
    it->second.bar->setValue(static_cast<int>(arm_progress(a) * 1000.0));
    const std::vector<EvalPoint> evals = eval_points(a);
    QString detail = QString::fromStdString(a.status);
    if (const QString repeated = over_repeats(a); !repeated.isEmpty()) {
      detail += repeated;
    } else if (!a.roles.empty() || !a.summary.is_null()) {  // it has figures
      detail += tr(" · %1 samples/s").arg(samples_per_second(a), 0, 'f', 0);
      if (!evals.empty()) detail += tr(" · quality %1").arg(evals.back().value, 0, 'f', 4);
    }
    if (const QString times = elapsed_and_eta(a); !times.isEmpty()) detail += " · " + times;
    if (!a.error.empty()) detail += " · " + QString::fromStdString(a.error);
    it->second.detail->setText(detail);
    set_text_tone(it->second.detail, a.status == "failed" ? Tone::error : Tone::plain);
  }
  charts_->show_arms(run.arms);
}

void RunView::rebuild_arms(const RunResults& run) {
  std::vector<std::string> order;
  for (const ArmResults& a : run.arms) order.push_back(a.name);
  if (order == row_order_) return;
  for (auto& [name, row] : rows_) {
    delete row.name;
    delete row.bar;
    delete row.detail;
  }
  rows_.clear();
  int r = 0;
  for (const ArmResults& a : run.arms) {
    ArmRow row{new QLabel(QString::fromStdString(a.name + "  (" + a.regime + ")"), arms_box_),
               new QProgressBar(arms_box_), new QLabel(arms_box_)};
    row.bar->setRange(0, 1000);
    row.bar->setFormat("%p%");
    row.bar->setAccessibleName(QString::fromStdString(a.name));
    QPalette p = row.name->palette();
    p.setColor(QPalette::WindowText, arm_color(static_cast<size_t>(r)));
    row.name->setPalette(p);
    // Two lines an arm: its name and bar, then its figures (wrapped in a narrow column).
    row.detail->setWordWrap(true);
    arms_grid_->addWidget(row.name, 2 * r, 0);
    arms_grid_->addWidget(row.bar, 2 * r, 1);
    arms_grid_->addWidget(row.detail, 2 * r + 1, 0, 1, 2);
    rows_[a.name] = row;
    ++r;
  }
  row_order_ = order;
}

QString RunView::error_text() const { return error_->isHidden() ? QString() : error_->text(); }
QString RunView::status_text() const { return status_->text(); }

QString RunView::detail(const std::string& arm) const {
  auto it = rows_.find(arm);
  return it == rows_.end() ? QString() : it->second.detail->text();
}

QProgressBar* RunView::progress(const std::string& arm) const {
  auto it = rows_.find(arm);
  return it == rows_.end() ? nullptr : it->second.bar;
}

}  // namespace quartet::gui

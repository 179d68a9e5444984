#include "gui/compare_view.h"

#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <memory>

#include "analysis/plan_check.h"
#include "analysis/repeats.h"
#include "analysis/summary.h"
#include "gui/chart_panel.h"
#include "gui/charts.h"
#include "gui/folders.h"
#include "gui/tone.h"

namespace quartet::gui {

using analysis::ArmResults;
using analysis::load_run;
using analysis::RunResults;

namespace {

// The prediction table's columns.
enum Column { kArm, kMeasured, kPredicted, kError, kColumns };

// An arm's figures over its repeats, one a line as the report gives them ("samples/s:
// 1234 ± 56 (n = 3)"), or "" for an arm without repeats.
QString repeats_tooltip(const ArmResults& arm) {
  QStringList lines;
  for (const analysis::RepeatMetric& m : analysis::repeat_metrics())
    if (const std::optional<analysis::Interval> i = analysis::repeat_interval(arm, m.key))
      lines << QString::fromStdString(m.label + ": " + analysis::interval_text(*i, m.format));
  if (lines.isEmpty()) return {};
  const nlohmann::json& identical = trainers::member(trainers::member(arm.summary, "repeats"), "identical");
  if (identical.is_boolean() && identical.get<bool>())
    lines << QObject::tr("Every repeat gave the same evaluations and final weights: the seed does not change this arm.");
  return QObject::tr("Over its repeats (mean ± 95 % interval):") + "\n" + lines.join("\n");
}

// How many repeats of the arm ran to their end ("" without repeats).
QString repeats_count(const ArmResults& arm) {
  const nlohmann::json& repeats = trainers::member(arm.summary, "repeats");
  return repeats.is_object() ? QString::number(trainers::integer(repeats, "n")) : QString();
}

}  // namespace

// Runs are lettered A, B, … in the list; the charts call their arms "A: single".
std::string run_letter(size_t index) {
  std::string letter(1, static_cast<char>('A' + index % 26));
  if (index >= 26) letter += std::to_string(index / 26);
  return letter;
}

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QHBoxLayout(this);
  auto* split = new QSplitter(Qt::Horizontal, this);
  layout->addWidget(split);
  auto* left = new QWidget(split);
  auto* lv = new QVBoxLayout(left);
  lv->setContentsMargins(0, 0, 0, 0);
  tree_ = new QTreeWidget(left);
  tree_->setHeaderLabels({tr("Run / arm"), tr("Regime"), tr("Status"), tr("Repeats")});
  tree_->headerItem()->setToolTip(3, tr("Repeats that ran to their end; the arm's tooltip gives its figures over them"));
  // Regime, status and repeats always whole; the names take what is left.
  tree_->header()->setStretchLastSection(false);
  tree_->header()->setSectionResizeMode(0, QHeaderView::Stretch);
  for (int c = 1; c < 4; ++c) tree_->header()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
  tree_->setToolTip(tr("Tick the arms to compare"));
  // Run folders of one experiment differ at their end (its time): cut their middle.
  tree_->setTextElideMode(Qt::ElideMiddle);
  lv->addWidget(tree_, 1);
  auto* buttons = new QHBoxLayout;
  auto* open = new QPushButton(tr("Add run…"), left);
  auto* remove = new QPushButton(tr("Remove run"), left);
  auto* predict = new QPushButton(tr("Predict on…"), left);
  predict->setToolTip(tr("Choose a cluster profile (clusters/*.json, or this machine's from quartet calibrate): "
                         "each arm is predicted on it beside what it measured"));
  buttons->addWidget(open);
  buttons->addWidget(remove);
  buttons->addWidget(predict);
  lv->addLayout(buttons);
  // Predicted beside measured: a table of its own under the runs, once a profile is chosen.
  cluster_label_ = new QLabel(left);
  cluster_label_->setWordWrap(true);
  cluster_label_->hide();
  lv->addWidget(cluster_label_);
  predicted_ = new QTreeWidget(left);
  predicted_->setRootIsDecorated(false);
  predicted_->setHeaderLabels({tr("Arm"), tr("Measured"), tr("Predicted"), tr("Error")});
  predicted_->headerItem()->setToolTip(kMeasured, tr("Training samples per second of training time, measured"));
  predicted_->headerItem()->setToolTip(kPredicted, tr("Samples per second the planner predicts on the chosen "
                                                      "cluster profile, from the profile alone"));
  predicted_->headerItem()->setToolTip(kError, tr("(predicted − measured) / measured"));
  for (int col : {kMeasured, kPredicted, kError}) predicted_->headerItem()->setTextAlignment(col, Qt::AlignRight);
  predicted_->header()->setStretchLastSection(false);
  predicted_->header()->setSectionResizeMode(kArm, QHeaderView::Stretch);
  for (int col = 1; col < kColumns; ++col) predicted_->header()->setSectionResizeMode(col, QHeaderView::ResizeToContents);
  predicted_->setTextElideMode(Qt::ElideMiddle);
  predicted_->hide();
  lv->addWidget(predicted_, 1);
  error_ = new QLabel(left);
  set_text_tone(error_, Tone::error);
  error_->setWordWrap(true);
  error_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  error_->hide();
  lv->addWidget(error_);
  charts_ = new ChartPanel(split);
  split->addWidget(left);
  split->addWidget(charts_);
  split->setStretchFactor(1, 3);
  split->setSizes({380, 1000});

  connect(open, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a run folder"), start_folder(kResultsFolder));
    if (dir.isEmpty()) return;
    remember_folder(kResultsFolder, dir);
    add_run(dir);
  });
  connect(remove, &QPushButton::clicked, this, &CompareView::remove_selected_run);
  connect(predict, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Predict on a cluster profile"),
                                                      start_folder(kClusterFolder), tr("Cluster profiles (*.json)"));
    if (file.isEmpty()) return;
    remember_folder(kClusterFolder, file);
    set_cluster(file);
  });
  connect(tree_, &QTreeWidget::itemChanged, this, [this] {
    if (!updating_) update_charts();
  });
}

void CompareView::show_error(const QString& message) {
  error_->setText(message);
  error_->show();
}

std::optional<QString> CompareView::add_run(const QString& dir) {
  try {
    add_run(load_run(dir.toStdString()));
  } catch (const std::exception& e) {
    const QString message = QString::fromStdString(e.what());
    show_error(message);
    return message;
  }
  error_->hide();
  emit run_opened(dir);
  return std::nullopt;
}

int CompareView::index_of(const std::filesystem::path& dir) const {
  std::error_code ec;
  for (size_t r = 0; r < runs_.size(); ++r)
    if (std::filesystem::equivalent(runs_[r].dir, dir, ec)) return static_cast<int>(r);
  return -1;
}

const RunResults* CompareView::run_for(const QString& dir) const {
  const int at = index_of(dir.toStdString());
  return at < 0 ? nullptr : &runs_[static_cast<size_t>(at)];
}

void CompareView::fill_item(QTreeWidgetItem* top, const RunResults& run, const QStringList& unpicked) {
  top->setText(2, QString::fromStdString(run.status));
  for (const ArmResults& a : run.arms) {
    auto* item = new QTreeWidgetItem(top, {QString::fromStdString(a.name), QString::fromStdString(a.regime),
                                           QString::fromStdString(a.status == "degraded"
                                                                      ? analysis::status_text(a.summary)
                                                                      : a.status),
                                           repeats_count(a)});
    if (const QString tip = repeats_tooltip(a); !tip.isEmpty())
      for (int c = 0; c < 4; ++c) item->setToolTip(c, tip);
    item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
    const bool has_figures = !a.roles.empty() || !a.summary.is_null();
    item->setCheckState(0, has_figures && !unpicked.contains(item->text(0)) ? Qt::Checked : Qt::Unchecked);
  }
  top->setExpanded(true);
}

void CompareView::add_run(RunResults run) {
  updating_ = true;
  if (const int at = index_of(run.dir); at >= 0) {
    // One entry a folder: read again in its place, the arms unticked staying so.
    QTreeWidgetItem* top = tree_->topLevelItem(at);
    QStringList unpicked;
    while (top->childCount() > 0) {
      std::unique_ptr<QTreeWidgetItem> child(top->takeChild(0));
      if (child->checkState(0) != Qt::Checked) unpicked << child->text(0);
    }
    fill_item(top, run, unpicked);
    runs_[static_cast<size_t>(at)] = std::move(run);
  } else {
    fill_item(new QTreeWidgetItem(tree_), run, {});
    runs_.push_back(std::move(run));
  }
  relabel();
  fill_predictions();
  updating_ = false;
  update_charts();
}

std::optional<QString> CompareView::set_cluster(const QString& file) {
  try {
    cluster_ = analysis::plan::load_cluster_file(file.toStdString());
  } catch (const std::exception& e) {
    const QString message = tr("Predict on %1: %2").arg(file, QString::fromStdString(e.what()));
    show_error(message);
    return message;
  }
  error_->hide();
  cluster_label_->setText(tr("Predicted on %1 (%2), from the profile alone")
                              .arg(QString::fromStdString(cluster_->name), QFileInfo(file).fileName()));
  cluster_label_->show();
  predicted_->show();
  fill_predictions();
  return std::nullopt;
}

void CompareView::clear_cluster() {
  cluster_.reset();
  cluster_label_->hide();
  predicted_->hide();
  predicted_->clear();
}

// The planner's rows (analysis/plan_check.h: the same as `quartet plan --check`), an arm
// a row, named as the charts name it.
void CompareView::fill_predictions() {
  predicted_->clear();
  if (!cluster_) return;
  for (size_t r = 0; r < runs_.size(); ++r)
    for (const analysis::CheckRow& row : analysis::check_rows(runs_[r], *cluster_)) {
      const std::string label = runs_.size() > 1 ? run_letter(r) + ": " + row.arm : row.arm;
      auto* item = new QTreeWidgetItem(predicted_, {QString::fromStdString(label)});
      item->setData(kArm, Qt::UserRole, static_cast<qulonglong>(r));
      item->setData(kArm, Qt::UserRole + 1, QString::fromStdString(row.arm));
      item->setToolTip(kArm, QString::fromStdString(row.arm + " (" + row.regime + ")"));
      if (row.measured > 0) item->setText(kMeasured, QString::number(row.measured, 'f', 1));
      if (!row.unsupported.empty()) {
        item->setText(kPredicted, tr("–"));
        item->setToolTip(kPredicted, tr("Not planned: %1").arg(QString::fromStdString(row.unsupported)));
      } else {
        item->setText(kPredicted, QString::number(row.predicted, 'f', 1));
        if (row.measured > 0)
          item->setText(kError, QString::asprintf("%+.1f %%", 100 * (row.predicted - row.measured) / row.measured));
      }
      for (int col : {kMeasured, kPredicted, kError}) item->setTextAlignment(col, Qt::AlignRight | Qt::AlignVCenter);
    }
}

QStringList CompareView::arm_figures(size_t run, const std::string& arm) const {
  for (int i = 0; i < predicted_->topLevelItemCount(); ++i) {
    const QTreeWidgetItem* item = predicted_->topLevelItem(i);
    if (item->data(kArm, Qt::UserRole).toULongLong() == run &&
        item->data(kArm, Qt::UserRole + 1).toString().toStdString() == arm)
      return {item->text(kMeasured), item->text(kPredicted), item->text(kError)};
  }
  return {};
}

void CompareView::relabel() {
  for (size_t r = 0; r < runs_.size(); ++r)
    if (QTreeWidgetItem* top = tree_->topLevelItem(static_cast<int>(r))) {
      // The folder's name (results/<name>-<time> by default) tells runs of one experiment apart.
      top->setText(0, QString::fromStdString(run_letter(r) + "  " + runs_[r].dir.filename().string()));
      top->setToolTip(0, QString::fromStdString("experiment " + runs_[r].name + " in " + runs_[r].dir.string()));
    }
}

void CompareView::remove_selected_run() {
  QTreeWidgetItem* item = tree_->currentItem();
  if (!item) return;
  if (item->parent()) item = item->parent();
  const int at = tree_->indexOfTopLevelItem(item);
  if (at < 0) return;
  delete tree_->takeTopLevelItem(at);
  runs_.erase(runs_.begin() + at);
  relabel();
  fill_predictions();
  update_charts();
}

void CompareView::set_arm_checked(size_t run, const std::string& arm, bool checked) {
  QTreeWidgetItem* top = tree_->topLevelItem(static_cast<int>(run));
  if (!top) return;
  for (int i = 0; i < top->childCount(); ++i)
    if (top->child(i)->text(0).toStdString() == arm) top->child(i)->setCheckState(0, checked ? Qt::Checked : Qt::Unchecked);
}

std::vector<ArmResults> CompareView::picked() const {
  std::vector<ArmResults> out;
  for (size_t r = 0; r < runs_.size(); ++r) {
    const QTreeWidgetItem* top = tree_->topLevelItem(static_cast<int>(r));
    for (size_t a = 0; a < runs_[r].arms.size(); ++a) {
      if (!top || static_cast<int>(a) >= top->childCount() || top->child(static_cast<int>(a))->checkState(0) != Qt::Checked)
        continue;
      ArmResults arm = runs_[r].arms[a];
      if (runs_.size() > 1) arm.label = run_letter(r) + ": " + arm.name;
      arm.run = static_cast<int>(r);
      out.push_back(std::move(arm));
    }
  }
  return out;
}

void CompareView::update_charts() { charts_->show_arms(picked()); }

QString CompareView::error_text() const { return error_->isHidden() ? QString() : error_->text(); }

}  // namespace quartet::gui

// The charts: a finished run's results (the committed fixture, and a fresh run of the
// quartet binary) load into every chart; a refresh replaces series in place; a running
// or pending arm charts without failing.

#include <QAbstractBarSeries>
#include <QBarSet>
#include <QLineSeries>
#include <QTemporaryDir>
#include <QValueAxis>
#include <QXYSeries>
#include <QtTest>
#include <memory>
#include <set>

#include "analysis/results_model.h"
#include "gui/chart_render.h"
#include "gui/charts.h"
#include "tests/gui/gui_test_util.h"

using namespace quartet::analysis;
using namespace quartet::gui;
namespace fs = std::filesystem;

namespace {

// Points in line series plus values in bar sets: what a chart actually draws.
int drawn_values(QChart* chart) {
  int n = 0;
  for (QAbstractSeries* s : chart->series()) {
    if (auto* xy = qobject_cast<QXYSeries*>(s)) n += xy->count();
    if (auto* bars = qobject_cast<QAbstractBarSeries*>(s))
      for (QBarSet* set : bars->barSets()) n += set->count();
  }
  return n;
}

QStringList series_names(QChart* chart) {
  QStringList names;
  for (QAbstractSeries* s : chart->series()) names << s->name();
  return names;
}

// More than one colour in the picture: the chart drew something.
bool has_ink(const QImage& image) {
  std::set<QRgb> colours;
  for (int y = 0; y < image.height(); y += 7)
    for (int x = 0; x < image.width(); x += 7) colours.insert(image.pixel(x, y));
  return colours.size() > 5;
}

// Every chart of `run`: it has content for every arm with data, and renders offscreen.
void expect_every_chart_has_content(const RunResults& run) {
  for (const ChartInfo& info : chart_kinds()) {
    std::unique_ptr<QChart> chart(make_chart(info.kind, run.arms));
    QVERIFY2(!chart->series().isEmpty(), info.id);
    QVERIFY2(drawn_values(chart.get()) > 0, info.id);
    const QStringList names = series_names(chart.get());
    if (info.kind == ChartKind::quality_wall || info.kind == ChartKind::quality_samples || info.kind == ChartKind::loss ||
        info.kind == ChartKind::projection)
      for (const ArmResults& a : run.arms)
        QVERIFY2(names.contains(QString::fromStdString(a.name)), (std::string(info.id) + ": " + a.name).c_str());
    const QImage image = render_chart(chart.release(), QSize(640, 400));
    QCOMPARE(image.size(), QSize(640, 400));
    QVERIFY2(has_ink(image), info.id);
  }
}

// A finished arm evaluated with `metric` at each of `values`, from its summary alone.
ArmResults evaluated_arm(const std::string& metric, const std::vector<double>& values) {
  ArmResults a;
  a.name = a.label = "single";
  a.regime = "single";
  a.status = "finished";
  nlohmann::json evals = nlohmann::json::array();
  for (size_t i = 0; i < values.size(); ++i)
    evals.push_back({{"step", i + 1}, {"samples", 100 * (i + 1)}, {"epoch", 0.1 * static_cast<double>(i + 1)},
                     {"wall", static_cast<double>(i + 1)}, {"value", values[i]}});
  a.summary = {{"metric", metric}, {"evaluations", evals}};
  return a;
}

double quality_axis_max(const ArmResults& arm) {
  std::unique_ptr<QChart> chart(make_chart(ChartKind::quality_samples, {arm}));
  return qobject_cast<QValueAxis*>(chart->axes(Qt::Vertical).front())->max();
}

}  // namespace

class ChartsTest : public QObject {
  Q_OBJECT

 private slots:
  // Accuracy and Dice end at 1, so their axis stops there; bits per character go on.
  void QualityAxisStopsAtOneOnlyForMetricsThatEndThere() {
    QCOMPARE(quality_axis_max(evaluated_arm("accuracy", {0.95, 0.99})), 1.0);
    QCOMPARE(quality_axis_max(evaluated_arm("dice", {0.95, 0.99})), 1.0);
    QVERIFY(quality_axis_max(evaluated_arm("bpc", {0.95, 0.99})) > 1.0);
    std::unique_ptr<QChart> chart(make_chart(ChartKind::quality_samples, {evaluated_arm("bpc", {3.1, 2.2})}));
    QCOMPARE(chart->axes(Qt::Vertical).front()->titleText(), QString("bpc"));
  }

  void FixtureRunLoadsIntoEveryChart() { expect_every_chart_has_content(load_run(gui_test::fixture_run())); }

  void FreshRunOfTheQuartetBinaryLoadsIntoEveryChart() {
    QTemporaryDir tmp;
    const QString out = tmp.filePath("run");
    const gui_test::ProcessResult r = gui_test::run_process(
        QUARTET_BINARY, {"run", QString::fromStdString(gui_test::fixture_spec().string()), "--out", out,
                         "--progress=none"});
    QVERIFY2(r.code == 0, qPrintable(r.output));
    const RunResults run = load_run(out.toStdString());
    QCOMPARE(run.status, std::string("finished"));
    expect_every_chart_has_content(run);
  }

  void RefillReplacesLineSeriesInPlace() {
    const RunResults run = load_run(gui_test::fixture_run());
    std::vector<ArmResults> early = run.arms;
    for (ArmResults& a : early) {
      a.summary = nullptr;  // as while it runs
      for (quartet::trainers::RoleRecords& r : a.roles) r.records.resize(r.records.size() / 2);
    }
    std::unique_ptr<QChart> chart(make_chart(ChartKind::cumulative_bytes, early));
    QLineSeries* ddp = nullptr;
    for (QAbstractSeries* s : chart->series())
      if (s->name() == "ddp-2") ddp = qobject_cast<QLineSeries*>(s);
    QVERIFY(ddp);
    const int before = ddp->count();
    const int series_before = static_cast<int>(chart->series().size());
    fill_chart(chart.get(), ChartKind::cumulative_bytes, run.arms);
    QVERIFY(chart->series().contains(ddp));
    QCOMPARE(static_cast<int>(chart->series().size()), series_before);
    QVERIFY(ddp->count() > before);
  }

  void RunningAndPendingArmsChartWithoutFailing() {
    RunResults run = load_run(gui_test::fixture_run());
    run.arms[3].summary = nullptr;
    run.arms[3].roles.front().records.resize(1);
    run.arms[4].summary = nullptr;
    run.arms[4].roles.clear();
    run.arms[4].status = "pending";
    for (const ChartInfo& info : chart_kinds()) {
      std::unique_ptr<QChart> chart(make_chart(info.kind, run.arms));
      QVERIFY(chart);
      std::vector<ArmResults> none;
      fill_chart(chart.get(), info.kind, none);  // an empty snapshot: a run not started
    }
  }

  void ArmsKeepOneColourInEveryChart() {
    QCOMPARE(arm_color(0), arm_color(10));
    QVERIFY(arm_color(0) != arm_color(1));
  }
};

QTEST_MAIN(ChartsTest)
#include "charts_test.moc"

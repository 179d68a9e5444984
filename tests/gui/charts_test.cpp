// The charts: a finished run's results (the committed fixture, and a fresh run of the
// quartet binary) load into every chart; a refresh replaces series in place; a running
// or pending arm charts without failing.

#include <QAbstractBarSeries>
#include <QBarSet>
#include <QCategoryAxis>
#include <QLegendMarker>
#include <QLogValueAxis>
#include <QLineSeries>
#include <QTemporaryDir>
#include <QValueAxis>
#include <QXYSeries>
#include <QtTest>
#include <memory>
#include <set>

#include "analysis/results_model.h"
#include "gui/chart_render.h"
#include "gui/chart_view.h"
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

  // Communication: a bar per arm in the arm's colour, a second run's hatched, a legend
  // naming them, and an axis that speaks bytes ("1 MB"), not 1e+09.
  void CommunicationBarsTakeTheirArmsColourAndTheAxisSaysBytes() {
    std::vector<ArmResults> arms = load_run(gui_test::fixture_run()).arms;
    std::vector<ArmResults> second = arms;
    for (ArmResults& a : second) {
      a.run = 1;
      a.label = "B: " + a.name;
    }
    for (ArmResults& a : arms) a.label = "A: " + a.name;
    arms.insert(arms.end(), second.begin(), second.end());
    std::unique_ptr<QChart> chart(make_chart(ChartKind::communication, arms));
    QAbstractBarSeries* bars = nullptr;
    for (QAbstractSeries* s : chart->series())
      if (!bars) bars = qobject_cast<QAbstractBarSeries*>(s);
    QVERIFY(bars);
    QCOMPARE(bars->count(), static_cast<int>(arms.size()));
    const std::vector<QColor> colors = arm_colors(arms);
    for (int i = 0; i < bars->count(); ++i) {
      QBarSet* set = bars->barSets()[i];
      QCOMPARE(set->label().toStdString(), arms[static_cast<size_t>(i)].label);
      QCOMPARE(set->brush().color(), colors[static_cast<size_t>(i)]);
      QCOMPARE(set->brush().style(), arms[static_cast<size_t>(i)].run == 0 ? Qt::SolidPattern : Qt::BDiagPattern);
    }
    QCOMPARE(colors[1], colors[arms.size() / 2 + 1]);  // an arm's colour in both runs
    QVERIFY(chart->legend()->isVisible());
    auto* y = qobject_cast<QCategoryAxis*>(chart->axes(Qt::Vertical).front());
    QVERIFY(y);
    const QStringList labels = y->categoriesLabels();
    QVERIFY(labels.contains("1 MB"));
    for (const QString& l : labels) QVERIFY2(!l.contains("e+") && l.endsWith("B"), qPrintable(l));
  }

  // The loss is smoothed as TensorBoard smooths it, its raw values a pale line beneath,
  // left out of the legend; 0 leaves it raw.
  void LossIsSmoothedWithTheRawLossPaleBeneath() {
    const std::vector<double> smooth = smooth_losses({1.0, 0.0, 1.0, 0.0}, 0.5);
    QCOMPARE(smooth[0], 1.0);  // debiased: the first value is itself
    QVERIFY(std::abs(smooth[1] - 1.0 / 3.0) < 1e-12);
    QCOMPARE(smooth_losses({2.0, 4.0}, 0.0), (std::vector<double>{2.0, 4.0}));
    const RunResults run = load_run(gui_test::fixture_run());
    std::unique_ptr<QChart> chart(make_chart(ChartKind::loss, run.arms));
    const QStringList names = series_names(chart.get());
    const qsizetype raw = names.indexOf("ddp-2 (raw)"), smoothed = names.indexOf("ddp-2");
    QVERIFY(raw >= 0 && smoothed >= 0);
    QVERIFY2(raw < names.indexOf("single"), "every raw line lies under every arm's own");
    auto* raw_series = qobject_cast<QLineSeries*>(chart->series()[raw]);
    QVERIFY(raw_series->pen().color().alpha() < 255);
    QVERIFY(raw_series->pen().widthF() < qobject_cast<QLineSeries*>(chart->series()[smoothed])->pen().widthF());
    // Live, an arm that starts later gets its pale line under the lines already drawn.
    std::vector<ArmResults> early = run.arms;
    for (size_t i = 1; i < early.size(); ++i) early[i].roles.clear();
    ChartView shown(make_chart(ChartKind::loss, early));
    shown.show();
    QVERIFY(QTest::qWaitForWindowExposed(&shown));
    QChart* live = shown.chart();
    fill_chart(live, ChartKind::loss, run.arms);
    const QStringList later = series_names(live);
    QVERIFY2(later.indexOf("ddp-2 (raw)") < later.indexOf("single"), qPrintable(later.join(", ")));
    QCoreApplication::processEvents();
    for (QLegendMarker* m : live->legend()->markers())
      QVERIFY2(m->isVisible() != m->label().endsWith("(raw)"), qPrintable(m->label()));
    chart->setProperty(kSmoothingProperty, 0.0);
    fill_chart(chart.get(), ChartKind::loss, run.arms);
    QVERIFY(!series_names(chart.get()).contains("ddp-2 (raw)"));
    chart->setProperty(kLogYProperty, true);
    fill_chart(chart.get(), ChartKind::loss, run.arms);
    QVERIFY(qobject_cast<QLogValueAxis*>(chart->axes(Qt::Vertical).front()));
  }

  // A second run's lines are dashed finely enough that the legend's short segment shows it.
  void ASecondRunsLinesAreDashedInTheLegendToo() {
    QVERIFY(run_pen(Qt::red, 0).dashPattern().size() <= 1 || run_pen(Qt::red, 0).style() == Qt::SolidLine);
    const QPen dashed = run_pen(Qt::red, 1);
    QCOMPARE(dashed.style(), Qt::CustomDashLine);
    double period = 0.0;
    for (double d : dashed.dashPattern()) period += d * dashed.widthF();
    QVERIFY2(period <= 8.0, "two dashes within a legend marker's 16 px");
  }

  // The mouse over a chart reads out the nearest point: its arm, x and y.
  void HoverReadsOutTheNearestPoint() {
    const RunResults run = load_run(gui_test::fixture_run());
    ChartView view(make_chart(ChartKind::quality_samples, run.arms));
    view.resize(800, 500);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QChart* chart = view.chart();
    QLineSeries* single = nullptr;
    for (QAbstractSeries* s : chart->series())
      if (s->name() == "single") single = qobject_cast<QLineSeries*>(s);
    QVERIFY(single);
    const QPointF point = single->at(single->count() - 1);
    const QPoint at = view.mapFromScene(chart->mapToScene(chart->mapToPosition(point, single)));
    const std::optional<ChartView::Readout> r = view.readout_at(at + QPoint(3, -2));
    QVERIFY(r);
    QCOMPARE(r->x, point.x());
    QCOMPARE(r->y, point.y());
    QVERIFY2(r->text.contains("accuracy"), qPrintable(r->text));
    QVERIFY(!view.readout_at(QPoint(2, 2)));  // off the plot
    QTest::mouseMove(view.viewport(), at + QPoint(2, 2));
    QVERIFY2(!view.shown_readout().isEmpty(), "the readout is shown where the mouse is");
  }

  // A drag zooms into the rectangle; a right click shows the whole chart again.
  void DragZoomsAndARightClickResets() {
    const RunResults run = load_run(gui_test::fixture_run());
    ChartView view(make_chart(ChartKind::loss, run.arms));
    view.set_refill([&] { fill_chart(view.chart(), ChartKind::loss, run.arms); });
    view.resize(800, 500);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    auto* x = qobject_cast<QValueAxis*>(view.chart()->axes(Qt::Horizontal).front());
    const double whole = x->max() - x->min();
    const QRectF plot = view.chart()->plotArea();
    const QPoint from = view.mapFromScene(view.chart()->mapToScene(plot.topLeft() + QPointF(40, 20)));
    const QPoint to = view.mapFromScene(view.chart()->mapToScene(plot.center()));
    QTest::mousePress(view.viewport(), Qt::LeftButton, {}, from);
    QTest::mouseMove(view.viewport(), to);
    QTest::mouseRelease(view.viewport(), Qt::LeftButton, {}, to);
    QVERIFY2(x->max() - x->min() < whole * 0.8, "zoomed in");
    QVERIFY(view.zoomed());
    QTest::mouseClick(view.viewport(), Qt::RightButton, {}, to);
    QVERIFY(!view.zoomed());
    QCOMPARE(x->max() - x->min(), whole);
  }

  // An empty throughput chart's axis reads 0.0, 0.5, 1.0, not 0, 1, 1, 2.
  void AnEmptyThroughputAxisHasDistinctLabels() {
    std::unique_ptr<QChart> chart(make_chart(ChartKind::throughput, {}));
    auto* y = qobject_cast<QValueAxis*>(chart->axes(Qt::Vertical).front());
    QVERIFY(y);
    QStringList ticks;
    for (int i = 0; i < y->tickCount(); ++i)
      ticks << QString::asprintf(y->labelFormat().toLatin1().constData(),
                                 y->min() + (y->max() - y->min()) * i / (y->tickCount() - 1));
    QCOMPARE(ticks.removeDuplicates(), 0);
  }
};

QTEST_MAIN(ChartsTest)
#include "charts_test.moc"

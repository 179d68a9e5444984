// A run with repeats in the app: each arm's bar stands at its mean with an error bar over
// the 95 % interval of summary.json, the quality curve is the repeats' mean in a band, the
// arms list gives the figures over the repeats, and identical repeats are said so.

#include <QAreaSeries>
#include <QBarCategoryAxis>
#include <QLabel>
#include <QLineSeries>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTreeWidget>
#include <QtTest>
#include <algorithm>
#include <memory>

#include "analysis/repeats.h"
#include "analysis/results_model.h"
#include "gui/chart_panel.h"
#include "gui/charts.h"
#include "gui/compare_view.h"
#include "gui/run_controller.h"
#include "gui/run_view.h"
#include "tests/gui/gui_test_util.h"

using namespace quartet::analysis;
using namespace quartet::gui;
using nlohmann::json;
using gui_test::read_text;
using gui_test::write_text;
namespace fs = std::filesystem;

namespace {

template <typename T>
T* series_named(QChart* chart, const QString& name) {
  for (QAbstractSeries* s : chart->series())
    if (s->name() == name) return qobject_cast<T*>(s);
  return nullptr;
}

// The lowest and highest y of a series' points.
std::pair<double, double> y_range(const QXYSeries* s) {
  double lo = s->at(0).y(), hi = lo;
  for (const QPointF& p : s->points()) lo = std::min(lo, p.y()), hi = std::max(hi, p.y());
  return {lo, hi};
}

QStringList categories(QChart* chart) {
  return qobject_cast<QBarCategoryAxis*>(chart->axes(Qt::Horizontal).front())->categories();
}

const json& metric(const ArmResults& arm, const char* key) { return arm.summary["repeats"]["metrics"][key]; }

}  // namespace

class RepeatsTest : public QObject {
  Q_OBJECT

  QTemporaryDir tmp_;
  QString out_;
  RunResults run_;

 private slots:
  // One tiny run of two arms, three repeats each, shared by every test below.
  void initTestCase() {
    json spec = json::parse(read_text(gui_test::fixture_spec()));
    spec["name"] = "tiny-repeats";
    spec["repeats"] = 3;
    spec["arms"] = json::array({spec["arms"][0], spec["arms"][2]});  // single, ddp-2
    const QString spec_path = tmp_.filePath("repeats.spec.json");
    write_text(spec_path.toStdString(), spec.dump());
    out_ = tmp_.filePath("run");
    const gui_test::ProcessResult r =
        gui_test::run_process(QUARTET_BINARY, {"run", spec_path, "--out", out_, "--progress=none"}, 300000);
    QVERIFY2(r.code == 0, qPrintable(r.output));
    run_ = load_run(out_.toStdString());
    QCOMPARE(run_.arms.size(), size_t{2});
    for (const ArmResults& a : run_.arms) QCOMPARE(a.repeat_evaluations.size(), size_t{2});
  }

  void ThroughputBarsStandAtTheMeanWithWhiskersOverTheSummarysInterval() {
    std::unique_ptr<QChart> chart(make_chart(ChartKind::throughput, run_.arms));
    for (const ArmResults& a : run_.arms) {
      const double mean = metric(a, "samples_per_second")["mean"].get<double>();
      const double half = metric(a, "samples_per_second")["half_width"].get<double>();
      QVERIFY(half > 0);  // wall-clock throughput varies between repeats
      auto* bar = series_named<QLineSeries>(chart.get(), QString::fromStdString(a.name) + " · 95 % interval");
      QVERIFY2(bar, a.name.c_str());
      const auto [lo, hi] = y_range(bar);
      QCOMPARE(lo, std::max(0.0, mean - half));  // the axis starts at 0
      QCOMPARE(hi, mean + half);
    }
    for (const QString& c : categories(chart.get())) QVERIFY2(c.contains("± "), qPrintable(c));
  }

  // Bytes do not depend on the seed: the same in every repeat, said so, with no whisker.
  void CommunicationTheSameInEveryRepeatIsLabelledIdentical() {
    std::unique_ptr<QChart> chart(make_chart(ChartKind::communication, run_.arms));
    QCOMPARE(metric(run_.arms[1], "bytes_per_process_per_epoch")["half_width"].get<double>(), 0.0);
    QVERIFY(!series_named<QLineSeries>(chart.get(), "ddp-2 · 95 % interval"));
    QVERIFY2(categories(chart.get()).back().endsWith("<br>identical"),
             qPrintable(categories(chart.get()).back()));
  }

  void QualityIsTheRepeatsMeanInABandOverEachEvaluationsInterval() {
    std::unique_ptr<QChart> chart(make_chart(ChartKind::quality_samples, run_.arms));
    const ArmResults& single = run_.arms[0];
    auto* line = series_named<QLineSeries>(chart.get(), "single · mean of 3");
    auto* band = series_named<QAreaSeries>(chart.get(), "single · mean of 3 · 95 % interval");
    QVERIFY(line && band);
    // Each repeat's last evaluation, read from its own folder.
    std::vector<double> last;
    for (int k = 1; k <= 3; ++k) {
      const json s = json::parse(read_text(repeat_dir(out_.toStdString(), k) / "single" / "summary.json"));
      last.push_back(s["evaluations"].back()["value"].get<double>());
    }
    const Interval expected = mean_interval(last);
    QCOMPARE(line->points().back().y(), expected.mean);
    QCOMPARE(band->lowerSeries()->points().back().y(), expected.mean - expected.half_width);
    QCOMPARE(band->upperSeries()->points().back().y(), std::min(1.0, expected.mean + expected.half_width));
    QCOMPARE(line->count(), static_cast<int>(eval_points(single).size()));
  }

  // What a workload that ignores the seed writes (the launcher's own statistics over equal
  // summaries): no zero-width whisker or band, and the charts say so.
  void IdenticalRepeatsAreSaidSoInsteadOfAZeroWidthInterval() {
    ArmResults same = run_.arms[0];
    same.summary["repeats"] = repeat_statistics({same.summary, same.summary, same.summary}, {1, 2, 3}, true);
    same.repeat_evaluations = {eval_points(same), eval_points(same)};
    std::unique_ptr<QChart> bars(make_chart(ChartKind::throughput, {same}));
    QVERIFY(!series_named<QLineSeries>(bars.get(), "single · 95 % interval"));
    QVERIFY(categories(bars.get()).front().endsWith("<br>identical"));
    std::unique_ptr<QChart> quality(make_chart(ChartKind::quality_wall, {same}));
    QVERIFY(series_named<QLineSeries>(quality.get(), "single · 3 identical repeats"));
    for (QAbstractSeries* s : quality->series()) QVERIFY2(!qobject_cast<QAreaSeries*>(s), qPrintable(s->name()));
  }

  void TheArmsListGivesEachFigureOverTheRepeats() {
    CompareView view;
    QVERIFY(!view.add_run(out_));
    auto* tree = view.findChild<QTreeWidget*>();
    QTreeWidgetItem* single = tree->topLevelItem(0)->child(0);
    QCOMPARE(single->text(3), QString("3"));
    const ArmResults& a = run_.arms[0];
    const std::optional<Interval> rate = repeat_interval(a, "samples_per_second");
    QVERIFY(rate);
    QCOMPARE(rate->mean, metric(a, "samples_per_second")["mean"].get<double>());
    const std::string line = "samples/s: " + interval_text(*rate, repeat_metrics().front().format);
    QVERIFY2(single->toolTip(0).contains(QString::fromStdString(line)), qPrintable(single->toolTip(0)));
    QVERIFY(single->toolTip(0).contains(" ± "));
  }

  // The live stream holds each arm's last repeat; once the run ends the view shows the
  // folder's figures over every repeat.
  void TheRunViewShowsTheIntervalsOnceARunWithRepeatsHasEnded() {
    QTemporaryDir tmp;
    json spec = json::parse(read_text(gui_test::fixture_spec()));
    spec["repeats"] = 2;
    spec["arms"] = json::array({spec["arms"][0]});
    RunController c;
    c.set_quartet(QUARTET_BINARY);
    RunView view(&c);
    QSignalSpy done(&c, &RunController::finished);
    QVERIFY(c.start(spec, tmp.filePath("run")));
    QVERIFY(done.wait(180000));
    QCOMPARE(done.front().front().toInt(), 0);
    view.refresh();
    QCOMPARE(view.shown().arms.front().repeat_evaluations.size(), size_t{1});
    QVERIFY(series_named<QLineSeries>(view.charts()->chart(ChartKind::throughput), "single · 95 % interval"));
    QVERIFY(series_named<QLineSeries>(view.charts()->chart(ChartKind::quality_wall), "single · mean of 2"));
    const std::optional<Interval> rate = repeat_interval(view.shown().arms.front(), "samples_per_second");
    QVERIFY(rate);
    const QString line = QString::fromStdString("samples/s " + interval_text(*rate, repeat_metrics().front().format));
    QStringList details;
    for (const QLabel* l : view.findChildren<QLabel*>()) details << l->text();
    QVERIFY2(details.join('\n').contains(line), qPrintable(details.join('\n')));
  }
};

QTEST_MAIN(RepeatsTest)
#include "repeats_test.moc"

// Running from the app: the event stream becomes live results; a run's progress and
// charts show; a failed, crashed or stopped run leaves the app responsive with the
// error shown.

#include <QFile>
#include <QProgressBar>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "gui/chart_panel.h"
#include "gui/run_controller.h"
#include "gui/run_stream.h"
#include "gui/run_view.h"
#include "tests/gui/gui_test_util.h"

using namespace quartet::gui;
using quartet::analysis::RunResults;
using nlohmann::json;

namespace {

json tiny_spec() { return json::parse(gui_test::read_text(gui_test::fixture_spec())); }

// Waits for the controller's run to end; returns its exit code (or -2 on timeout).
int wait_for(RunController& c, int timeout_ms = 120000) {
  QSignalSpy done(&c, &RunController::finished);
  if (!c.running()) return c.exit_code();
  if (!done.wait(timeout_ms)) return -2;
  return done.front().front().toInt();
}

}  // namespace

class RunViewTest : public QObject {
  Q_OBJECT

 private slots:
  void StreamFoldsEventsIntoResults() {
    RunStream s(tiny_spec());
    QCOMPARE(s.snapshot().arms.size(), size_t{5});
    QCOMPARE(s.snapshot().arms[0].status, std::string("pending"));
    s.feed(R"({"event":"run_started","run_dir":"results/x","arms":5})");
    s.feed(R"({"event":"arm_started","arm":"single","index":0,"total_samples":1024})");
    s.feed(R"({"event":"step","arm":"single","record":{"type":"step","role":"trainer","step":1,"samples":512,"wall":0.5,"epoch":1.0,"eval":{"value":0.7,"seconds":0.1}}})");
    s.feed("quartet: some text that is not an event");
    s.feed(R"({"event":"error","arm":"ddp-2","message":"rank1 died"})");
    const RunResults& r = s.snapshot();
    QCOMPARE(r.dir.string(), std::string("results/x"));
    QCOMPARE(r.arms[0].status, std::string("running"));
    QCOMPARE(arm_progress(r.arms[0]), 0.5);
    QCOMPARE(eval_points(r.arms[0]).size(), size_t{1});
    QCOMPARE(r.arms[2].status, std::string("failed"));
    QCOMPARE(s.errors().front(), std::string("ddp-2: rank1 died"));
    QCOMPARE(s.log().size(), size_t{1});
    s.feed(R"({"event":"run_finished","status":"failed"})");
    QVERIFY(s.finished());
    QCOMPARE(s.snapshot().status, std::string("failed"));
  }

  // Each repeat starts its arms again: the stream shows the repeat that runs, not its
  // records after the last one's.
  void ARepeatStartingAgainReplacesTheArmsRecords() {
    RunStream s(tiny_spec());
    const char* step = R"({"event":"step","arm":"single","record":{"type":"step","role":"trainer","step":1,"samples":32,"wall":0.1,"epoch":0.1}})";
    s.feed(R"({"event":"arm_started","arm":"single","index":0,"total_samples":64})");
    s.feed(step);
    s.feed(R"({"event":"arm_finished","arm":"single","summary":{"status":"finished"}})");
    s.feed(R"({"event":"arm_started","arm":"single","index":0,"total_samples":64})");
    QCOMPARE(s.snapshot().arms[0].status, std::string("running"));
    QVERIFY(s.snapshot().arms[0].summary.is_null());
    s.feed(step);
    QCOMPARE(s.snapshot().arms[0].roles.front().records.size(), size_t{1});
  }

  void ARunShowsItsProgressAndChartsAndFinishes() {
    QTemporaryDir tmp;
    RunController c;
    c.set_quartet(QUARTET_BINARY);
    RunView view(&c);
    view.resize(1200, 800);
    QVERIFY(c.start(tiny_spec(), tmp.filePath("run")));
    QCOMPARE(wait_for(c), 0);
    view.refresh();
    QVERIFY(view.error_text().isEmpty());
    QVERIFY2(view.status_text().contains("finished"), qPrintable(view.status_text()));
    for (const char* arm : {"single", "accum-2", "ddp-2", "split-2", "fedavg-4"}) {
      QProgressBar* bar = view.progress(arm);
      QVERIFY2(bar, arm);
      QCOMPARE(bar->value(), bar->maximum());
    }
    QVERIFY(!view.charts()->chart(ChartKind::quality_wall)->series().isEmpty());
    QCOMPARE(view.shown().arms.size(), size_t{5});
    QVERIFY(QFile::exists(tmp.filePath("run/summary.md")));
  }

  void AFailedRunShowsItsError() {
    QTemporaryDir tmp;
    json spec = tiny_spec();
    spec["workload"] = {{"name", "fashion-mnist"}, {"model", "mlp"},
                        {"data_dir", tmp.filePath("no-dataset-here").toStdString()}};
    RunController c;
    c.set_quartet(QUARTET_BINARY);
    RunView view(&c);
    QVERIFY(c.start(spec, tmp.filePath("run")));
    QCOMPARE(wait_for(c), 2);
    view.refresh();
    QVERIFY2(view.error_text().contains("dataset-fashion-mnist"), qPrintable(view.error_text()));
    QVERIFY2(view.status_text().contains("failed"), qPrintable(view.status_text()));
    for (const quartet::analysis::ArmResults& a : view.shown().arms) QCOMPARE(a.status, std::string("not run"));
  }

  void ACrashedRunnerLeavesTheViewResponsiveWithTheErrorShown() {
    QTemporaryDir tmp;
    // A stand-in runner: starts a run, writes half an event, and dies by a signal.
    const QString fake = tmp.filePath("quartet");
    gui_test::write_text(fake.toStdString(),
                         "#!/bin/sh\n"
                         "echo '{\"event\":\"run_started\",\"run_dir\":\"x\",\"arms\":5}'\n"
                         "echo '{\"event\":\"arm_started\",\"arm\":\"single\",\"index\":0,\"total_samples\":9}'\n"
                         "printf '{\"event\":\"step\",\"arm\":\"sin'\n"
                         "kill -9 $$\n");
    QFile::setPermissions(fake, QFile::permissions(fake) | QFileDevice::ExeOwner);
    RunController c;
    c.set_quartet(fake);
    RunView view(&c);
    QVERIFY(c.start(tiny_spec(), tmp.filePath("run")));
    QCOMPARE(wait_for(c), -1);
    view.refresh();
    QVERIFY2(view.error_text().contains("crashed"), qPrintable(view.error_text()));
    // The arm it was running failed; the others never ran (none stays "pending").
    QCOMPARE(view.shown().arms[0].status, std::string("failed"));
    for (size_t i = 1; i < view.shown().arms.size(); ++i) QCOMPARE(view.shown().arms[i].status, std::string("not run"));
    QVERIFY(!c.running());
    QTest::qWait(50);  // the event loop still turns
    // A missing runner is refused up front, with the reason.
    c.set_quartet(tmp.filePath("not-there"));
    QVERIFY(!c.start(tiny_spec(), tmp.filePath("run2")));
    QVERIFY(c.error().contains("cannot find the quartet runner"));
  }

  void StoppingARunKeepsItsFolderAndSaysHowToResume() {
    QTemporaryDir tmp;
    json spec = tiny_spec();
    spec["workload"]["train_samples"] = 8192;
    spec["train"]["epochs"] = 20;  // long enough to be stopped mid-way
    spec["arms"] = json::array({{{"name", "single"}, {"regime", "single"}}});
    RunController c;
    c.set_quartet(QUARTET_BINARY);
    RunView view(&c);
    QVERIFY(c.start(spec, tmp.filePath("run")));
    QTRY_VERIFY_WITH_TIMEOUT(samples_done(c.stream().snapshot().arms[0]) > 0, 60000);
    c.stop();
    QCOMPARE(wait_for(c, 60000), 130);
    view.refresh();
    // Stopped is not an error: no red text, the status says what was kept and how to go on.
    QVERIFY(c.stopped());
    QVERIFY2(c.error().isEmpty(), qPrintable(c.error()));
    QVERIFY2(view.error_text().isEmpty(), qPrintable(view.error_text()));
    QVERIFY2(view.status_text().contains("interrupted") && view.status_text().contains("Resume"),
             qPrintable(view.status_text()));
    const json status = json::parse(gui_test::read_text(tmp.filePath("run/run.json").toStdString()));
    QCOMPARE(status["status"], json("interrupted"));
    // Resume continues the same folder to the end.
    QVERIFY2(c.resume(tmp.filePath("run")), qPrintable(c.error()));
    QCOMPARE(wait_for(c, 120000), 0);
    const json resumed = json::parse(gui_test::read_text(tmp.filePath("run/run.json").toStdString()));
    QCOMPARE(resumed["status"], json("finished"));
    QVERIFY(!c.resume(tmp.filePath("not-a-run")));
    QVERIFY2(c.error().contains("not a run folder"), qPrintable(c.error()));
  }
};

QTEST_MAIN(RunViewTest)
#include "run_view_test.moc"

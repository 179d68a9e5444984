// The desktop app's window: menus with the usual shortcuts, recent files remembered in
// the settings, finished runs compared, a corrupt results folder reported, not fatal.

#include <QAction>
#include <QChartView>
#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>
#include <QGraphicsTextItem>
#include <QLegendMarker>
#include <QLineSeries>
#include <QProgressBar>
#include <QTabWidget>
#include <QSettings>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QtTest>

#include "gui/chart_panel.h"
#include "gui/chart_view.h"
#include "analysis/plan_check.h"
#include "gui/compare_view.h"
#include "gui/folders.h"
#include "gui/main_window.h"
#include "gui/run_controller.h"
#include "gui/run_view.h"
#include "gui/spec_editor.h"
#include "tests/gui/gui_test_util.h"

using namespace quartet::gui;
using quartet::analysis::ArmResults;
using quartet::analysis::samples_done;
namespace fs = std::filesystem;

namespace {

// Every tab of `panel` as shown: no visible text of a chart ends in "…" or "...".
void expect_no_cut_text(ChartPanel* panel, const QString& where) {
  QTabWidget* tabs = panel->tabs();
  for (int i = 0; i < tabs->count(); ++i) {
    tabs->setCurrentIndex(i);
    QCoreApplication::processEvents();
    QCoreApplication::processEvents();  // fit_labels runs once the layout has the new size
    for (ChartView* view : panel->views()) {
      if (!view->isVisible()) continue;
      view->grab();
      for (QGraphicsItem* item : view->scene()->items()) {
        if (!item->isVisible()) continue;
        QString text;
        if (auto* t = dynamic_cast<QGraphicsTextItem*>(item)) text = t->toPlainText();
        if (auto* t = dynamic_cast<QGraphicsSimpleTextItem*>(item)) text = t->text();
        QVERIFY2(!text.contains("...") && !text.contains(QChar(0x2026)),
                 qPrintable(where + ", " + tabs->tabText(i) + ", " + view->chart()->title() + ": \"" + text + "\""));
      }
    }
  }
}

}  // namespace

class MainWindowTest : public QObject {
  Q_OBJECT

  QTemporaryDir settings_dir_;

 private slots:
  void initTestCase() {
    // Settings (the recent files) go to this run's own folder: another run of these tests
    // at the same time must not see them.
    QVERIFY(settings_dir_.isValid());
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, settings_dir_.path());
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, settings_dir_.path());
    QCoreApplication::setOrganizationName("QuartetTest");
    QCoreApplication::setApplicationName("quartet-gui-test");
    qputenv("QUARTET_GUI_NO_DIALOGS", "1");
  }
  void init() { QSettings().clear(); }

  void MenusHaveTheUsualShortcuts() {
    MainWindow w;
    QCOMPARE(w.action("open")->shortcut(), QKeySequence(QKeySequence::Open));
    QCOMPARE(w.action("save")->shortcut(), QKeySequence(QKeySequence::Save));
    QCOMPARE(w.action("quit")->shortcut(), QKeySequence(QKeySequence::Quit));
    QCOMPARE(w.action("run")->shortcut(), QKeySequence(Qt::Key_F5));
    QCOMPARE(w.action("stop")->shortcut(), QKeySequence(Qt::SHIFT | Qt::Key_F5));
    QVERIFY(w.action("export_charts"));
    QVERIFY(w.action("open_results"));
    QVERIFY(w.action("run")->isEnabled());
    QVERIFY(!w.action("stop")->isEnabled());
  }

  void OpenAndSaveAreRememberedAsRecentFiles() {
    QTemporaryDir tmp;
    MainWindow w;
    const QString spec = QString::fromStdString(gui_test::fixture_spec().string());
    QCOMPARE(w.open_spec(spec), QString());
    QVERIFY(w.windowTitle().contains("tiny-run.spec.json"));
    const QString saved = tmp.filePath("copy.json");
    QCOMPARE(w.save_spec(saved), QString());
    const QStringList recent = w.recent_files();
    QCOMPARE(recent.size(), 2);
    QCOMPARE(recent.front(), QFileInfo(saved).absoluteFilePath());
    MainWindow again;  // a new window reads them back from the settings
    QCOMPARE(again.recent_files(), recent);
    QVERIFY(w.open_spec(tmp.filePath("missing.json")).contains("cannot open"));
  }

  void AnInvalidExperimentIsNotStarted() {
    MainWindow w;
    w.editor()->set_spec({{"name", "x"}});
    const QString problem = w.start_run();
    QVERIFY2(problem.contains("not valid"), qPrintable(problem));
  }

  void FinishedRunsAreComparedArmByArm() {
    QTemporaryDir tmp;
    const fs::path second = gui_test::copy_fixture(tmp.path().toStdString());
    MainWindow w;
    QCOMPARE(w.open_results(QString::fromStdString(gui_test::fixture_run().string())), QString());
    QCOMPARE(w.open_results(QString::fromStdString(second.string())), QString());
    CompareView* c = w.compare();
    QCOMPARE(c->runs().size(), size_t{2});
    QCOMPARE(c->picked().size(), size_t{10});
    c->set_arm_checked(1, "fedavg-4", false);
    const std::vector<ArmResults> picked = c->picked();
    QCOMPARE(picked.size(), size_t{9});
    QCOMPARE(picked.front().label, std::string("A: single"));
    QCOMPARE(picked.back().label, std::string("B: split-2"));
    QStringList names;
    for (QAbstractSeries* s : c->charts()->chart(ChartKind::quality_samples)->series()) names << s->name();
    QVERIFY2(names.contains("B: ddp-2") && !names.contains("B: fedavg-4"), qPrintable(names.join(",")));
    // The run view shows the last folder opened.
    QCOMPARE(w.run_view()->shown().arms.size(), size_t{5});
  }

  // Predict on a cluster profile: every arm shows the planner's figure beside the one it
  // measured, the same as `quartet plan --check` prints; a file that is no profile is
  // named in the view and changes nothing.
  void ComparedArmsShowPredictedBesideMeasured() {
    MainWindow w;
    w.resize(1280, 720);
    w.show();
    QCOMPARE(w.open_results(QString::fromStdString(gui_test::fixture_run().string())), QString());
    w.show_tab(2);
    CompareView* c = w.compare();
    const QString profile = QString::fromStdString((fs::path(QUARTET_SOURCE_DIR) / "clusters" / "cpu-10gbe.json").string());
    QCOMPARE(c->arm_figures(0, "single").value(1), QString());  // no prediction before a profile is chosen
    QVERIFY(!c->set_cluster(profile));
    const auto cluster = quartet::analysis::plan::load_cluster_file(profile.toStdString());
    const std::vector<quartet::analysis::CheckRow> rows = quartet::analysis::check_rows(c->runs().front(), cluster);
    QVERIFY(!rows.empty());
    for (const quartet::analysis::CheckRow& r : rows) {
      const QStringList shown = c->arm_figures(0, r.arm);
      QCOMPARE(shown.size(), 3);
      if (r.measured > 0) QCOMPARE(shown[0], QString::number(r.measured, 'f', 1));
      if (!r.unsupported.empty()) {
        QCOMPARE(shown[1], QString("–"));
        continue;
      }
      QCOMPARE(shown[1], QString::number(r.predicted, 'f', 1));
      const double error = 100 * (r.predicted - r.measured) / r.measured;
      QCOMPARE(shown[2], QString::asprintf("%+.1f %%", error));
    }
    QTemporaryDir tmp;
    const QString bad = tmp.filePath("bad.json");
    QFile f(bad);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{\"name\": 3}");
    f.close();
    const std::optional<QString> problem = c->set_cluster(bad);
    QVERIFY(problem && problem->contains("bad.json"));
    QCOMPARE(c->error_text(), *problem);
    QCOMPARE(c->arm_figures(0, "single").value(1), QString::number(rows.front().predicted, 'f', 1));
  }

  // Two runs of the same arms at the app's default size, as a person sees them: every
  // chart's legend names the arms, no label is cut short, an arm keeps its colour across
  // the runs (the runs differ in line style instead).
  void ComparedRunsAreReadableAtTheDefaultSize() {
    QTemporaryDir tmp;
    const fs::path second = gui_test::copy_fixture(tmp.path().toStdString());
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    QCOMPARE(w.open_results(QString::fromStdString(gui_test::fixture_run().string())), QString());
    QCOMPARE(w.open_results(QString::fromStdString(second.string())), QString());
    w.show_tab(2);
    CompareView* c = w.compare();
    QStringList labels;
    for (const ArmResults& a : c->picked()) labels << QString::fromStdString(a.label);
    QTabWidget* tabs = c->charts()->tabs();
    for (int i = 1; i < tabs->count(); ++i) {
      tabs->setCurrentIndex(i);
      auto* view = qobject_cast<QChartView*>(tabs->widget(i));
      QVERIFY(view);
      QCoreApplication::processEvents();
      QCoreApplication::processEvents();  // the labels are fitted once the layout has the view's size
      view->grab();  // lays the chart out as it is drawn
      const QString tab = tabs->tabText(i);
      for (QGraphicsItem* item : view->scene()->items()) {
        if (!item->isVisible()) continue;
        QString text;
        if (auto* t = dynamic_cast<QGraphicsTextItem*>(item)) text = t->toPlainText();
        if (auto* t = dynamic_cast<QGraphicsSimpleTextItem*>(item)) text = t->text();
        QVERIFY2(!text.contains("...") && !text.contains(QChar(0x2026)), qPrintable(tab + ": \"" + text + "\""));
      }
      QStringList legend;
      for (QLegendMarker* m : view->chart()->legend()->markers())
        if (m->isVisible() && !m->label().startsWith("target ")) legend << m->label();
      if (tab == "Memory" || tab == "Communication") continue;  // tags, or one set of bars
      for (const QString& entry : legend) QVERIFY2(labels.contains(entry), qPrintable(tab + ": " + entry));
      if (tab == "Throughput" || tab.startsWith("Quality") || tab == "Loss") QCOMPARE(legend, labels);
    }
    QChart* quality = c->charts()->chart(ChartKind::quality_samples);
    auto pen_of = [&](const QString& name) {
      for (QAbstractSeries* s : quality->series())
        if (s->name() == name) return qobject_cast<QLineSeries*>(s)->pen();
      return QPen();
    };
    QCOMPARE(pen_of("A: ddp-2").color(), pen_of("B: ddp-2").color());
    QVERIFY(pen_of("A: ddp-2").color() != pen_of("A: single").color());
    QVERIFY(pen_of("A: ddp-2").style() != pen_of("B: ddp-2").style());
  }

  // At 1280×720 and 1600×1000, in the Run view and in Compare, on every tab: no axis
  // title, legend entry or label is cut short.
  void EverythingIsLegibleAtSmallAndLargeWindowSizes() {
    QTemporaryDir tmp;
    const fs::path second = gui_test::copy_fixture(tmp.path().toStdString());
    for (const QSize size : {QSize(1280, 720), QSize(1600, 1000)}) {
      MainWindow w;
      w.resize(size);
      w.show();
      QVERIFY(QTest::qWaitForWindowExposed(&w));
      QCOMPARE(w.open_results(QString::fromStdString(gui_test::fixture_run().string())), QString());
      w.show_tab(1);
      expect_no_cut_text(w.run_view()->charts(), QString("Run at %1x%2").arg(size.width()).arg(size.height()));
      if (QTest::currentTestFailed()) return;
      QCOMPARE(w.open_results(QString::fromStdString(second.string())), QString());
      w.show_tab(2);
      expect_no_cut_text(w.compare()->charts(), QString("Compare at %1x%2").arg(size.width()).arg(size.height()));
    }
  }

  // Shift+F5 mid-run: the status bar says stopped (not an error, no exit code), Resume is
  // offered and continues the folder to the end.
  void AStoppedRunIsNotAnErrorAndResumes() {
    QTemporaryDir tmp;
    QSettings().setValue("results_dir", tmp.path());
    MainWindow w;
    w.controller()->set_quartet(QUARTET_BINARY);
    nlohmann::json spec = nlohmann::json::parse(gui_test::read_text(gui_test::fixture_spec()));
    spec["workload"]["train_samples"] = 8192;
    spec["train"]["epochs"] = 20;
    spec["arms"] = nlohmann::json::array({{{"name", "single"}, {"regime", "single"}}});
    w.editor()->set_spec(spec);
    QVERIFY(!w.action("resume")->isEnabled());
    QCOMPARE(w.start_run(), QString());
    QTRY_VERIFY_WITH_TIMEOUT(samples_done(w.controller()->stream().snapshot().arms[0]) > 0, 60000);
    QSignalSpy done(w.controller(), &RunController::finished);
    w.stop_run();
    QVERIFY(done.wait(60000));
    const QString message = w.statusBar()->currentMessage();
    QVERIFY2(message.startsWith("Stopped") && !message.contains("exit code"), qPrintable(message));
    QVERIFY(w.action("resume")->isEnabled());
    QCOMPARE(w.resume_run(), QString());
    QVERIFY(done.wait(120000));
    QCOMPARE(w.controller()->exit_code(), 0);
    QVERIFY2(w.statusBar()->currentMessage().startsWith("Run finished"), qPrintable(w.statusBar()->currentMessage()));
    QVERIFY(!w.action("resume")->isEnabled());
  }

  // Stopped while its second arm runs, then resumed: the first arm, kept by the resume,
  // shows finished with its records and charts from the start to the end.
  void AResumedRunShowsItsFinishedArms() {
    QTemporaryDir tmp;
    QSettings().setValue("results_dir", tmp.path());
    MainWindow w;
    w.controller()->set_quartet(QUARTET_BINARY);
    nlohmann::json spec = nlohmann::json::parse(gui_test::read_text(gui_test::fixture_spec()));
    spec["workload"]["train_samples"] = 4096;
    spec["arms"] = nlohmann::json::array({{{"name", "first"}, {"regime", "single"}, {"train", {{"epochs", 1}}}},
                                          {{"name", "second"}, {"regime", "single"}, {"train", {{"epochs", 40}}}}});
    w.editor()->set_spec(spec);
    QCOMPARE(w.start_run(), QString());
    QTRY_VERIFY_WITH_TIMEOUT(samples_done(w.controller()->stream().snapshot().arms[1]) > 0, 90000);
    QSignalSpy done(w.controller(), &RunController::finished);
    w.stop_run();
    QVERIFY(done.wait(60000));
    QCOMPARE(w.resume_run(), QString());
    auto check_first = [&](const char* when) {
      w.run_view()->refresh();
      const ArmResults& first = w.run_view()->shown().arms[0];
      QVERIFY2(first.status == "finished", when);
      QVERIFY2(samples_done(first) > 0, when);
      QVERIFY2(w.run_view()->progress("first")->value() == 1000, when);
      QStringList lines;
      for (QAbstractSeries* s : w.run_view()->charts()->chart(ChartKind::quality_samples)->series()) lines << s->name();
      QVERIFY2(lines.contains("first"), qPrintable(QString(when) + ": " + lines.join(", ")));
      QVERIFY2(w.run_view()->detail("first").contains(" s"), qPrintable(w.run_view()->detail("first")));
    };
    check_first("while the resume runs");
    if (QTest::currentTestFailed()) return;
    QVERIFY(done.wait(180000));
    QCOMPARE(w.controller()->exit_code(), 0);
    check_first("once it has finished");
    QCOMPARE(w.run_view()->shown().status, std::string("finished"));
    // The comparison holds the folder once, as it ended.
    QCOMPARE(w.compare()->runs().size(), size_t{1});
    QCOMPARE(w.compare()->runs().front().status, std::string("finished"));
  }

  // A run folder opened again is read again in its place, not listed twice.
  void ARunFolderIsListedOnce() {
    QTemporaryDir tmp;
    const fs::path dir = gui_test::copy_fixture(tmp.path().toStdString());
    MainWindow w;
    QCOMPARE(w.open_results(QString::fromStdString(dir.string())), QString());
    w.compare()->set_arm_checked(0, "ddp-2", false);
    QCOMPARE(w.open_results(QString::fromStdString(dir.string()) + "/"), QString());
    QCOMPARE(w.compare()->runs().size(), size_t{1});
    for (const ArmResults& a : w.compare()->picked()) QVERIFY(a.name != "ddp-2");  // unticked stays so
  }

  // Each file dialog starts where it was last used: a volume opened moves none of the others.
  void EachDialogKeepsItsOwnFolder() {
    QTemporaryDir tmp;
    QDir(tmp.path()).mkpath("volumes");
    QDir(tmp.path()).mkpath("runs");
    remember_folder(kVolumeFolder, tmp.filePath("volumes/ct.nii.gz"));
    QSettings().setValue("results_dir", tmp.filePath("runs"));
    QCOMPARE(start_folder(kVolumeFolder), tmp.filePath("volumes"));
    QCOMPARE(start_folder(kResultsFolder), tmp.filePath("runs"));
    QVERIFY(start_folder(kSpecFolder) != tmp.filePath("volumes"));
    QVERIFY(QFileInfo(start_folder(kSpecFolder)).isDir());
  }

  // An error in the status bar gives way to the next action's outcome.
  void AStatusBarErrorGivesWayToTheNextSuccess() {
    QTemporaryDir tmp;
    MainWindow w;
    QVERIFY(!w.open_paths({tmp.filePath("missing.json")}).isEmpty());
    QVERIFY(w.statusBar()->currentMessage().contains("missing.json"));
    QCOMPARE(w.open_results(QString::fromStdString(gui_test::fixture_run().string())), QString());
    QVERIFY2(w.statusBar()->currentMessage().startsWith("Opened the run"), qPrintable(w.statusBar()->currentMessage()));
  }

  void HelpHasAQuickGuideAndTheShortcuts() {
    MainWindow w;
    QVERIFY(w.action("guide"));
    QVERIFY(w.action("shortcuts"));
    QVERIFY(w.quick_guide().contains("Resume"));
    const QString keys = w.shortcuts_text();
    for (const char* key : {"F5", "F6", "Ctrl+O", "Ctrl+Shift+R"}) QVERIFY2(keys.contains(key), key);
  }

  void ACorruptResultsFolderGivesAMessage() {
    QTemporaryDir tmp;
    const fs::path dir = gui_test::copy_fixture(tmp.path().toStdString());
    gui_test::write_text(dir / "ddp-2" / "roles" / "rank0.jsonl", "{\"type\":\"step\"}\n");
    MainWindow w;
    const QString problem = w.open_results(QString::fromStdString(dir.string()));
    QVERIFY2(problem.contains("rank0.jsonl") && problem.contains("numeric \"wall\""), qPrintable(problem));
    QCOMPARE(w.compare()->runs().size(), size_t{0});
    QCOMPARE(w.compare()->error_text(), problem);
  }

  // A path on the command line that cannot be opened says so in the window, not only
  // on stderr; the experiment shown stays what it was.
  void AMissingSpecOnTheCommandLineIsShownInTheWindow() {
    QTemporaryDir tmp;
    MainWindow w;
    const QString missing = tmp.filePath("no-such-experiment.json");
    const QStringList problems = w.open_paths({missing});
    QCOMPARE(problems.size(), 1);
    QVERIFY2(problems.front().contains("no-such-experiment.json"), qPrintable(problems.front()));
    QVERIFY2(w.statusBar()->currentMessage().contains("no-such-experiment.json"),
             qPrintable(w.statusBar()->currentMessage()));
    QVERIFY(w.editor()->path().isEmpty());
    QVERIFY(w.open_paths({QString::fromStdString(gui_test::fixture_spec())}).isEmpty());
  }

  void ChartsExportAsImages() {
    QTemporaryDir tmp;
    MainWindow w;
    QCOMPARE(w.open_results(QString::fromStdString(gui_test::fixture_run().string())), QString());
    const QStringList files = w.compare()->charts()->export_to(tmp.filePath("charts"), true, true);
    QCOMPARE(files.size(), 16);  // 8 charts, PNG and SVG
    for (const QString& f : files) QVERIFY2(QFileInfo(f).size() > 1000, qPrintable(f));
  }

  void ReportForTheShownRunIsWritten() {
    QTemporaryDir tmp;
    const fs::path dir = gui_test::copy_fixture(tmp.path().toStdString());
    MainWindow w;
    QVERIFY(!w.write_report_for_shown_run().isEmpty());  // nothing shown yet
    QCOMPARE(w.open_results(QString::fromStdString(dir.string())), QString());
    QString index;
    QCOMPARE(w.write_report_for_shown_run(&index), QString());
    QVERIFY(QFileInfo::exists(index));
    QVERIFY2(QFileInfo(index).isAbsolute(), qPrintable(index));  // a browser gets a whole file URL
  }
};

QTEST_MAIN(MainWindowTest)
#include "main_window_test.moc"

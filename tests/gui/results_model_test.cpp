// The results reader: a real run folder loads with every arm and role; a corrupt one
// gives a message naming the file, never a crash.

#include <QTemporaryDir>
#include <QtTest>

#include "gui/results_model.h"
#include "tests/gui/gui_test_util.h"

using namespace quartet::gui;
namespace fs = std::filesystem;

namespace {

// The message load_run throws for `dir`, or "" when it loads.
std::string load_error(const fs::path& dir) {
  try {
    load_run(dir);
  } catch (const ResultsError& e) {
    return e.what();
  }
  return "";
}

const ArmResults& arm(const RunResults& run, const std::string& name) {
  for (const ArmResults& a : run.arms)
    if (a.name == name) return a;
  throw std::runtime_error("no arm " + name);
}

}  // namespace

class ResultsModelTest : public QObject {
  Q_OBJECT

 private slots:
  void FinishedRunLoadsEveryArmInSpecOrder() {
    const RunResults run = load_run(gui_test::fixture_run());
    QCOMPARE(run.status, std::string("finished"));
    QCOMPARE(run.arms.size(), size_t{5});
    const std::vector<std::string> names{"single", "accum-2", "ddp-2", "split-2", "fedavg-4"};
    for (size_t i = 0; i < names.size(); ++i) {
      QCOMPARE(run.arms[i].name, names[i]);
      QCOMPARE(run.arms[i].status, std::string("finished"));
      QVERIFY(run.arms[i].summary.is_object());
      QVERIFY2(!eval_points(run.arms[i]).empty(), names[i].c_str());
    }
    QVERIFY(run.warnings.empty());
  }

  void ArmsKeepTheirRolesAndEmulatedLinks() {
    const RunResults run = load_run(gui_test::fixture_run());
    QCOMPARE(arm(run, "ddp-2").roles.size(), size_t{2});
    QCOMPARE(arm(run, "fedavg-4").timeline()->role, std::string("server"));
    QCOMPARE(arm(run, "single").timeline()->role, std::string("trainer"));
    QCOMPARE(arm(run, "fedavg-4").link, std::string("wan-100mbit"));
    QCOMPARE(arm(run, "split-2").link, std::string("1gbe"));
    QCOMPARE(arm(run, "single").link, std::string("loopback"));
  }

  void CumulativeBytesGrowAndEndAtTheArmsTraffic() {
    const RunResults run = load_run(gui_test::fixture_run());
    const ArmResults& fed = arm(run, "fedavg-4");
    const std::vector<BytesPoint> bytes = cumulative_bytes(fed);
    QVERIFY(bytes.size() > 2);
    for (size_t i = 1; i < bytes.size(); ++i) QVERIFY(bytes[i].bytes >= bytes[i - 1].bytes);
    const double total = fed.summary["bytes"]["sent"].get<double>() + fed.summary["bytes"]["received"].get<double>();
    QCOMPARE(bytes.back().bytes, total);
    for (const BytesPoint& b : cumulative_bytes(arm(run, "single"))) QCOMPARE(b.bytes, 0.0);
  }

  void MemoryIsPerKindOfProcessAndByTag() {
    const RunResults run = load_run(gui_test::fixture_run());
    const std::vector<ProcessMemory> fed = process_memory(arm(run, "fedavg-4"));
    QCOMPARE(fed.size(), size_t{2});
    QVERIFY((fed[0].kind == "pool" && fed[1].kind == "server") || (fed[0].kind == "server" && fed[1].kind == "pool"));
    const std::vector<ProcessMemory> single = process_memory(arm(run, "single"));
    QCOMPARE(single.size(), size_t{1});
    QCOMPARE(single[0].kind, std::string());
    double params = 0.0;
    for (const auto& [tag, bytes] : single[0].tags)
      if (tag == "parameters") params = bytes;
    QVERIFY(params > 0);
  }

  void ArmWithoutSummaryIsReadFromItsRecords() {
    QTemporaryDir tmp;
    const fs::path dir = gui_test::copy_fixture(tmp.path().toStdString());
    const double from_summary = samples_per_second(arm(load_run(dir), "ddp-2"));
    fs::remove(dir / "ddp-2" / "summary.json");
    const RunResults run = load_run(dir);
    const ArmResults& ddp = arm(run, "ddp-2");
    QVERIFY(ddp.summary.is_null());
    QCOMPARE(samples_done(ddp), int64_t{1024});
    QVERIFY(samples_per_second(ddp) > 0.5 * from_summary && samples_per_second(ddp) < 2.0 * from_summary);
    QVERIFY(!eval_points(ddp).empty());
  }

  void TornLastRecordLineIsIgnored() {
    QTemporaryDir tmp;
    const fs::path dir = gui_test::copy_fixture(tmp.path().toStdString());
    const fs::path f = dir / "single" / "roles" / "trainer.jsonl";
    const size_t before = load_run(dir).arms[0].roles[0].records.size();
    gui_test::write_text(f, gui_test::read_text(f) + "{\"type\":\"step\",\"wall\":1");
    QCOMPARE(load_run(dir).arms[0].roles[0].records.size(), before);
  }

  void MissingFolderOrSpecNamesTheProblem() {
    QTemporaryDir tmp;
    const fs::path dir = tmp.path().toStdString();
    QVERIFY(load_error(dir / "nowhere").find("no such folder") != std::string::npos);
    QVERIFY(load_error(dir).find("not a Quartet run folder (no spec.json") != std::string::npos);
  }

  void CorruptFilesGiveAMessageNamingTheFile_data() {
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("content");
    QTest::addColumn<QString>("expected");
    QTest::newRow("spec not JSON") << "spec.json" << "{\"spec\": " << "spec.json: not valid JSON";
    QTest::newRow("spec without arms") << "spec.json" << "{\"spec\": {\"name\": \"x\"}}" << "spec.arms should be";
    QTest::newRow("arm name escapes") << "spec.json"
                                      << "{\"spec\": {\"arms\": [{\"name\": \"../x\", \"regime\": \"single\"}]}}"
                                      << "is not a folder name";
    QTest::newRow("run.json an array") << "run.json" << "[1, 2]" << "run.json: expected a JSON object";
    QTest::newRow("summary garbage") << "ddp-2/summary.json" << "\x01\x02 not json" << "summary.json: not valid JSON";
    QTest::newRow("summary mistyped") << "ddp-2/summary.json" << "{\"samples_per_second\": \"fast\"}"
                                      << "\"samples_per_second\" should be a number";
    QTest::newRow("record line garbage") << "single/roles/trainer.jsonl" << "{\"type\":\"step\"}\nnot json\n{}\n"
                                         << "trainer.jsonl:2: not a JSON record";
    QTest::newRow("step without wall") << "single/roles/trainer.jsonl"
                                       << "{\"type\":\"step\",\"samples\":1,\"step\":1}\n"
                                       << "needs a numeric \"wall\"";
    QTest::newRow("record not an object") << "split-2/roles/server.jsonl" << "[1]\n" << "expected a JSON object";
  }

  void CorruptFilesGiveAMessageNamingTheFile() {
    QFETCH(QString, file);
    QFETCH(QString, content);
    QFETCH(QString, expected);
    QTemporaryDir tmp;
    const fs::path dir = gui_test::copy_fixture(tmp.path().toStdString());
    gui_test::write_text(dir / file.toStdString(), content.toStdString());
    const std::string message = load_error(dir);
    QVERIFY2(message.find(expected.toStdString()) != std::string::npos, message.c_str());
  }

  void RoleKindDropsTheIndex() {
    QCOMPARE(role_kind("pool12"), std::string("pool"));
    QCOMPARE(role_kind("rank0"), std::string("rank"));
    QCOMPARE(role_kind("server"), std::string("server"));
  }
};

QTEST_GUILESS_MAIN(ResultsModelTest)
#include "results_model_test.moc"

// quartet report: writes into RUN_DIR/report/ only; the HTML references its chart images
// and they exist; `quartet report` reaches quartet-report; bad input exits with code 2.

#include <QImage>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>
#include <set>

#include "analysis/results_model.h"
#include "gui/report.h"
#include "tests/gui/gui_test_util.h"

using namespace quartet::gui;
using quartet::analysis::load_run;
using quartet::analysis::parse_formats;
namespace fs = std::filesystem;

namespace {

// Every file under `dir` except those under report/, with its size.
std::set<std::pair<std::string, uintmax_t>> files_outside_report(const fs::path& dir) {
  std::set<std::pair<std::string, uintmax_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = fs::relative(e.path(), dir).string();
    if (rel.rfind("report", 0) == 0) continue;
    out.insert({rel, e.is_regular_file() ? e.file_size() : 0});
  }
  return out;
}

}  // namespace

class ReportTest : public QObject {
  Q_OBJECT

 private slots:
  void HtmlReportReferencesChartImagesThatExist() {
    QTemporaryDir tmp;
    const fs::path dir = gui_test::copy_fixture(tmp.path().toStdString());
    const auto before = files_outside_report(dir);
    const std::vector<fs::path> written = write_report(load_run(dir), parse_formats("png,svg,md,html"));
    QVERIFY(!written.empty());
    for (const fs::path& f : written) QCOMPARE(f.parent_path(), dir / "report");
    QCOMPARE(files_outside_report(dir), before);  // nothing outside report/ changed

    const QString html = QString::fromStdString(gui_test::read_text(dir / "report" / "index.html"));
    const QRegularExpression img("<img src=\"([^\"]+)\"");
    int images = 0;
    for (auto it = img.globalMatch(html); it.hasNext();) {
      const QString src = it.next().captured(1);
      const fs::path file = dir / "report" / src.toStdString();
      QVERIFY2(fs::exists(file), qPrintable(src));
      QVERIFY2(!QImage(QString::fromStdString(file.string())).isNull(), qPrintable(src));
      ++images;
    }
    QCOMPARE(images, 7);
    for (const char* part : {"Summary (measured)", "Projection over link profiles", "projected: wan-100mbit",
                             "measured s/epoch", "fedavg-4", "bytes × 8 / bandwidth + latency"})
      QVERIFY2(html.contains(part), part);
    QVERIFY(fs::file_size(dir / "report" / "projection.svg") > 1000);
    const std::string md = gui_test::read_text(dir / "report" / "report.md");
    QVERIFY(md.find("![Throughput per arm](throughput.png)") != std::string::npos);
  }

  void QuartetReportHandsOverToQuartetReport() {
    QTemporaryDir tmp;
    const fs::path dir = gui_test::copy_fixture(tmp.path().toStdString());
    const gui_test::ProcessResult r =
        gui_test::run_process(QUARTET_BINARY, {"report", QString::fromStdString(dir.string()), "--format", "html"});
    QVERIFY2(r.code == 0, qPrintable(r.output));
    QVERIFY(fs::exists(dir / "report" / "index.html"));
    QVERIFY(fs::exists(dir / "report" / "throughput.png"));
    QVERIFY(!fs::exists(dir / "report" / "throughput.svg"));
  }

  void CorruptFolderExitsWithCode2AndAMessage() {
    QTemporaryDir tmp;
    const fs::path dir = gui_test::copy_fixture(tmp.path().toStdString());
    gui_test::write_text(dir / "split-2" / "summary.json", "{ truncated");
    const gui_test::ProcessResult r = gui_test::run_process(QUARTET_BINARY, {"report", QString::fromStdString(dir.string())});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.output.contains("split-2/summary.json: not valid JSON"), qPrintable(r.output));
    QVERIFY(!fs::exists(dir / "report"));
    const gui_test::ProcessResult bad =
        gui_test::run_process(QUARTET_BINARY, {"report", QString::fromStdString(dir.string()), "--format", "pdf"});
    QCOMPARE(bad.code, 2);
    QVERIFY2(bad.output.contains("unknown format \"pdf\""), qPrintable(bad.output));
  }
};

QTEST_MAIN(ReportTest)
#include "report_test.moc"

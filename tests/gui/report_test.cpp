// quartet report: writes into RUN_DIR/report/ only; the HTML references its chart images
// and they exist; `quartet report` reaches quartet-report for charts (tests/cli/report_test.cpp
// covers Markdown and bad input).

#include <QImage>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include "analysis/results_model.h"
#include "gui/charts.h"
#include "gui/report.h"
#include "tests/gui/gui_test_util.h"

using namespace quartet::gui;
using quartet::analysis::load_run;
using quartet::analysis::parse_formats;
namespace fs = std::filesystem;

class ReportTest : public QObject {
  Q_OBJECT

 private slots:
  void HtmlReportReferencesChartImagesThatExist() {
    QTemporaryDir tmp;
    const fs::path dir = gui_test::copy_fixture(tmp.path().toStdString());
    const auto before = gui_test::files_outside_report(dir);
    const std::vector<fs::path> written = write_report(load_run(dir), parse_formats("png,svg,md,html"));
    QVERIFY(!written.empty());
    for (const fs::path& f : written) QCOMPARE(f.parent_path(), dir / "report");
    QCOMPARE(gui_test::files_outside_report(dir), before);  // nothing outside report/ changed

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
    QCOMPARE(images, static_cast<int>(chart_kinds().size()));  // one image per chart
    for (const char* part : {"Summary (measured)", "Projection over link profiles", "<td>wan-100mbit</td>",
                             "measured s/epoch", "fedavg-4", "bytes × 8 / bandwidth + latency"})
      QVERIFY2(html.contains(part), part);
    // The page takes the window's width; the projection's links are rows of a table of
    // their own, so its tables fit; the caption says what the chart draws.
    QVERIFY(!html.contains("max-width:1100px"));
    QVERIFY(html.contains("<th>link: projected s/epoch</th>"));
    QVERIFY(!html.contains("<th class=\"num\">projected: "));
    QVERIFY(!html.contains("Dashed lines: projected"));
    QVERIFY(fs::file_size(dir / "report" / "projection.svg") > 1000);
    const std::string md = gui_test::read_text(dir / "report" / "report.md");
    QVERIFY(md.find("![Throughput per arm](throughput.png)") != std::string::npos);
  }

  // With a cluster profile, the HTML page (and report.md) add every arm predicted on it
  // beside what it measured.
  void HtmlReportShowsPredictedBesideMeasured() {
    QTemporaryDir tmp;
    const fs::path dir = gui_test::copy_fixture(tmp.path().toStdString());
    const quartet::analysis::RunResults run = load_run(dir);
    const auto cluster = quartet::analysis::plan::load_cluster_file(
        (fs::path(QUARTET_SOURCE_DIR) / "clusters" / "cpu-10gbe.json").string());
    write_report(run, parse_formats("svg,md,html"), &cluster);
    const QString html = QString::fromStdString(gui_test::read_text(dir / "report" / "index.html"));
    QVERIFY(html.contains("<h2>Predicted beside measured</h2>"));
    QVERIFY(html.contains("on the profile " + QString::fromStdString(cluster.name)));
    QVERIFY(html.contains("<th class=\"num\">predicted</th><th class=\"num\">measured</th>"));
    for (const quartet::analysis::ArmResults& a : run.arms)
      QVERIFY2(html.contains(QString::fromStdString("<tr><td>" + a.name + "</td>")), a.name.c_str());
    const std::string md = gui_test::read_text(dir / "report" / "report.md");
    QVERIFY(md.find("## Predicted beside measured") != std::string::npos);
    // Without a profile there is no such section.
    write_report(run, parse_formats("svg,html"));
    QVERIFY(!QString::fromStdString(gui_test::read_text(dir / "report" / "index.html")).contains("Predicted beside"));
  }

  void QuartetReportHandsOverToQuartetReport() {
    QTemporaryDir tmp;
    const fs::path dir = gui_test::copy_fixture(tmp.path().toStdString());
    const gui_test::ProcessResult r =
        gui_test::run_process(QUARTET_BINARY, {"report", QString::fromStdString(dir.string()), "--format", "html"});
    QVERIFY2(r.code == 0, qPrintable(r.output));
    QVERIFY(fs::exists(dir / "report" / "index.html"));
    // It says where the page is, to open in a browser.
    QVERIFY2(r.output.contains(QString::fromStdString((dir / "report" / "index.html").string())), qPrintable(r.output));
    QVERIFY(fs::exists(dir / "report" / "throughput.png"));
    QVERIFY(!fs::exists(dir / "report" / "throughput.svg"));
  }
};

QTEST_MAIN(ReportTest)
#include "report_test.moc"

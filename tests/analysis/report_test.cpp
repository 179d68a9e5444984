// The report without Qt: formats parse, numbers read as people write them, summary.md and
// the report show one table of the arms, and the Markdown page states the projection.

#include "analysis/report.h"

#include <gtest/gtest.h>

#include "analysis/summary.h"
#include "tests/run_fixture.h"

namespace quartet::analysis {
namespace {

using test_util::fixture_run;

TEST(Report, FormatsParseAndImagesComeWithPages) {
  const ReportFormats all = parse_formats("png,svg,md,html");
  EXPECT_TRUE(all.png && all.svg && all.md && all.html);
  const ReportFormats html = parse_formats("html");
  EXPECT_TRUE(html.html && html.png && !html.svg);
  // Markdown alone is the tables, no charts: it needs no Qt.
  const ReportFormats md = parse_formats("md");
  EXPECT_TRUE(md.md && !md.png && !md.svg && !md.html);
  EXPECT_FALSE(needs_charts(md));
  EXPECT_TRUE(needs_charts(parse_formats("md,svg")));
  EXPECT_TRUE(needs_charts(html));
  EXPECT_THROW(parse_formats("png,pdf"), std::invalid_argument);
  EXPECT_THROW(parse_formats(""), std::invalid_argument);
}

TEST(Report, NumbersReadAsPeopleWriteThem) {
  EXPECT_EQ(format_bytes(1584536041.7), "1.58 GB");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_seconds(125.0), "2:05");
  EXPECT_EQ(format_seconds(12.34), "12.3 s");
  EXPECT_EQ(format_mib(24.5 * 1024 * 1024), "24.5 MiB");
  EXPECT_EQ(format_seconds(0.045), "45 ms");
  EXPECT_EQ(format_seconds(3725.0), "1:02:05");
}

TEST(Report, SummaryMdAndTheReportShowOneTableOfTheArms) {
  const RunResults run = load_run(fixture_run());
  std::vector<nlohmann::json> summaries;
  for (const ArmResults& a : run.arms) summaries.push_back(a.summary);
  const std::string table = to_markdown(arms_table(run.arms));
  EXPECT_EQ(summary_table(run.name, summaries), "# " + run.name + "\n\n" + summary_markdown(run));
  EXPECT_NE(summary_markdown(run).find(table), std::string::npos);
  EXPECT_NE(table.find("| fedavg-4 | federated | finished |"), std::string::npos) << table;
}

// Beside the last evaluation, the best one and the epoch it came at: a run that peaked
// early says so.
TEST(Report, TheTableGivesTheBestQualityBesideTheFinal) {
  ArmResults arm;
  arm.name = "peaked";
  arm.regime = "single";
  arm.status = "finished";
  for (const auto& [epoch, value] : {std::pair{1.0, 0.61}, std::pair{2.0, 0.83}, std::pair{3.0, 0.72}})
    arm.add_record({{"type", "step"}, {"role", "trainer"}, {"step", int(epoch)}, {"samples", int(epoch) * 10},
                    {"epoch", epoch}, {"wall", epoch}, {"eval", {{"value", value}, {"seconds", 0.0}}}});
  const std::string table = to_markdown(arms_table({arm}));
  EXPECT_NE(table.find("| 0.7200 | 0.8300 (epoch 2.0) |"), std::string::npos) << table;
}

TEST(Report, AnArmNotStartedShowsDashes) {
  ArmResults pending;
  pending.name = "later";
  pending.regime = "single";
  pending.status = "pending";
  const std::string table = to_markdown(arms_table({pending}));
  EXPECT_NE(table.find("| later | single | pending | — | — | — | — | — | — | — | — |"), std::string::npos) << table;
}

TEST(Report, MarkdownStatesTheProjectionAndItsAssumptions) {
  const RunResults run = load_run(fixture_run());
  const std::string md = report_markdown(run, {});
  for (const char* part : {"## Summary (measured)", "## Projection over link profiles", "Assumptions:",
                           "bytes × 8 / bandwidth + latency", "| projected: wan-100mbit |", "measured s/epoch",
                           "| fedavg-4 | per round: the slowest client's"})
    EXPECT_NE(md.find(part), std::string::npos) << part;
  EXPECT_EQ(md.find("## Charts"), std::string::npos);
  const std::string with_charts = report_markdown(run, {{"throughput.png", "Throughput per arm", "Samples/s."}});
  EXPECT_NE(with_charts.find("## Charts\n\n![Throughput per arm](throughput.png)\n\nSamples/s."), std::string::npos);
}

}  // namespace
}  // namespace quartet::analysis

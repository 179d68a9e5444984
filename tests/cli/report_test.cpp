// `quartet report`: --format md writes the tables and the link projection without Qt and
// prints them; formats that need charts say where they come from; bad input exits with
// code 2 and one line. Runs on a copy of the committed run folder (tests/run_fixture.h).

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/cli/cli_util.h"
#include "tests/run_fixture.h"

namespace {

namespace fs = std::filesystem;
using quartet::test_util::copy_fixture;
using quartet::test_util::files_outside_report;
using quartet::test_util::write_text;
using cli_util::file_bytes;
using cli_util::quartet;
using cli_util::Result;

class CliReport : public cli_util::FolderTest {
 protected:
  CliReport() : FolderTest("cli_report") {}
};

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

TEST_F(CliReport, MarkdownPrintsAndWritesTheTablesAndTheProjection) {
  const fs::path run = copy_fixture(dir_);
  const auto before = files_outside_report(run);
  const Result r = quartet({"report", run.string(), "--format", "md"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string md = file_bytes(run / "report" / "report.md");
  for (const char* part : {"## Summary (measured)", "| fedavg-4 | federated | finished |",
                           "## Projection over link profiles", "Assumptions:", "bytes × 8 / bandwidth + latency",
                           "| arm | critical path | compute s/epoch |", "| projected: wan-100mbit |",
                           "| split-2 | clients in turn:"}) {
    EXPECT_NE(md.find(part), std::string::npos) << part;
    EXPECT_NE(r.out.find(part), std::string::npos) << part;
  }
  EXPECT_NE(r.out.find(md), std::string::npos);  // the page printed whole
  EXPECT_EQ(md.find("## Charts"), std::string::npos);
  for (const auto& e : fs::directory_iterator(run / "report")) EXPECT_EQ(e.path().filename(), "report.md");
  EXPECT_EQ(files_outside_report(run), before);  // nothing outside report/ changed

  const Result quiet = quartet({"report", run.string(), "--format", "md", "-q"}, dir_);
  EXPECT_EQ(quiet.code, 0) << quiet.out;
  EXPECT_EQ(quiet.out, "");
  EXPECT_EQ(file_bytes(run / "report" / "report.md"), md);
}

TEST_F(CliReport, HelpNamesTheFormats) {
  const Result r = quartet({"report", "--help"}, dir_);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--format"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("md alone"), std::string::npos) << r.out;
}

TEST_F(CliReport, BadInputExitsWithCode2AndOneLine) {
  const fs::path run = copy_fixture(dir_);
  const fs::path empty = dir_ / "empty";
  fs::create_directories(empty);
  const struct {
    std::vector<std::string> args;
    std::string expected;
  } cases[] = {
      {{"report", (dir_ / "nowhere").string(), "--format", "md"}, "nowhere: no such folder"},
      {{"report", empty.string(), "--format", "md"}, "not a Quartet run folder"},
      {{"report", run.string(), "--format", "pdf"}, "unknown format \"pdf\""},
      {{"report", run.string(), "--format", "md,pdf"}, "unknown format \"pdf\""},
  };
  for (const auto& c : cases) {
    const Result r = quartet(c.args, dir_);
    EXPECT_EQ(r.code, 2) << c.expected << ": " << r.out;
    EXPECT_NE(r.out.find(c.expected), std::string::npos) << r.out;
    EXPECT_EQ(lines(r.out), 1u) << r.out;
  }
  EXPECT_FALSE(fs::exists(run / "report"));
}

TEST_F(CliReport, CorruptFolderExitsWithCode2AndAMessage) {
  const fs::path dir = copy_fixture(dir_);
  write_text(dir / "split-2" / "summary.json", "{ truncated");
  for (const char* formats : {"md", "png,svg,md,html"}) {
    const Result r = quartet({"report", dir.string(), "--format", formats}, dir_);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("split-2/summary.json: not valid JSON"), std::string::npos) << r.out;
  }
  EXPECT_FALSE(fs::exists(dir / "report"));
}

TEST_F(CliReport, ChartsWithoutQuartetReportSayThatMarkdownNeedsNoQt) {
  // A quartet alone in its folder, as a build without Qt leaves it.
  const fs::path alone = dir_ / "bin" / "quartet";
  fs::create_directories(alone.parent_path());
  fs::copy_file(QUARTET_BINARY, alone);
  const fs::path run = copy_fixture(dir_);
  const fs::path log = dir_ / "charts.txt";
  const int status =
      std::system((alone.string() + " report " + run.string() + " --format png > " + log.string() + " 2>&1").c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string out = file_bytes(log);
  EXPECT_NE(out.find("need quartet-report"), std::string::npos) << out;
  EXPECT_NE(out.find("--format md"), std::string::npos) << out;
  EXPECT_EQ(lines(out), 1u) << out;
  EXPECT_FALSE(fs::exists(run / "report"));
}

}  // namespace

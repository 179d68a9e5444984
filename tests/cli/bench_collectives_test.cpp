// `quartet bench-collectives --hierarchical`: its output's shape (never its timings):
// per size, the hierarchical all-reduce's columns, then intra, inter and flat busbw.

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"

namespace {

class BenchCollectives : public cli_util::FolderTest {
 protected:
  BenchCollectives() : FolderTest("bench-collectives") {}
};

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

TEST_F(BenchCollectives, HierarchicalPrintsBusbwPerLevelBesideFlat) {
  const cli_util::Result r = cli_util::quartet({"bench-collectives", "--hierarchical", "--hosts", "2", "--ranks", "4",
                                                "--sizes", "64K,1M", "--iters", "3", "--warmup", "1"},
                                               dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("backend hierarchical, 4 ranks"), std::string::npos) << r.out;
  std::istringstream lines(r.out);
  std::vector<std::vector<std::string>> header, rows;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("size(B)") != std::string::npos) header.push_back(words(line));
    else if (!line.empty() && line[0] != '#') rows.push_back(words(line));
  }
  ASSERT_EQ(header.size(), 1u) << r.out;
  const std::vector<std::string> h(header[0].begin() + 1, header[0].end());  // after '#'
  EXPECT_EQ(h, (std::vector<std::string>{"size(B)", "count", "type", "redop", "time(us)", "algbw(GB/s)",
                                         "busbw(GB/s)", "intra(GB/s)", "inter(GB/s)", "flat(GB/s)", "check"}));
  ASSERT_EQ(rows.size(), 2u) << r.out;
  EXPECT_EQ(rows[0][0], "65536");
  EXPECT_EQ(rows[1][0], "1048576");
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), h.size()) << r.out;
    for (size_t c = 6; c <= 9; ++c) EXPECT_GT(std::stod(row[c]), 0.0) << h[c] << "\n" << r.out;
    EXPECT_EQ(row.back(), "ok");
  }
}

TEST_F(BenchCollectives, HostsWithoutHierarchicalExitsWith2) {
  cli_util::expect_exit2_with(cli_util::quartet({"bench-collectives", "--hosts", "2"}, dir_),
                              "--hosts: simulated hosts are for --hierarchical");
}

}  // namespace

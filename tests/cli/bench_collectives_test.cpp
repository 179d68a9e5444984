// `quartet bench-collectives`: its output's shape (never its timings). --hierarchical:
// per size, the hierarchical all-reduce's columns, then intra, inter and flat busbw;
// --op all_to_all over a list of rank counts: one nccl-tests-style table per count.

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

TEST_F(BenchCollectives, AllToAllPrintsATableForEachRankCount) {
  const cli_util::Result r = cli_util::quartet({"bench-collectives", "--op", "all_to_all", "--ranks", "2,4", "--sizes",
                                                "64K,1M", "--iters", "3", "--warmup", "1"},
                                               dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t two = r.out.find("all_to_all (float32, equal chunks), backend gloo, 2 ranks");
  const size_t four = r.out.find("all_to_all (float32, equal chunks), backend gloo, 4 ranks");
  ASSERT_NE(two, std::string::npos) << r.out;
  ASSERT_NE(four, std::string::npos) << r.out;
  EXPECT_LT(two, four);
  std::istringstream lines(r.out);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] != '#') rows.push_back(words(line));
  ASSERT_EQ(rows.size(), 4u) << r.out;
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), 8u) << r.out;
    EXPECT_EQ(rows[i][0], i % 2 == 0 ? "65536" : "1048576");
    const double algbw = std::stod(rows[i][5]), busbw = std::stod(rows[i][6]);
    EXPECT_GT(algbw, 0.0) << r.out;
    const double ranks = i < 2 ? 2.0 : 4.0;  // busbw = algbw (N-1)/N, as printed to 3 places
    EXPECT_NEAR(busbw, algbw * (ranks - 1) / ranks, 2e-3) << r.out;
    EXPECT_EQ(rows[i].back(), "ok");
  }
}

TEST_F(BenchCollectives, AllToAllSizeNotSplittingIntoChunksExitsWith2) {
  cli_util::expect_exit2_with(
      cli_util::quartet({"bench-collectives", "--op", "all_to_all", "--ranks", "3", "--sizes", "1M"}, dir_),
      "--sizes: 1048576 bytes do not split into 3 equal chunks");
}

TEST_F(BenchCollectives, RankListWithANonNumberExitsWith2) {
  cli_util::expect_exit2_with(cli_util::quartet({"bench-collectives", "--ranks", "2,x"}, dir_),
                              "--ranks: \"x\" is not a number of ranks");
}

TEST_F(BenchCollectives, HostsWithoutHierarchicalExitsWith2) {
  cli_util::expect_exit2_with(cli_util::quartet({"bench-collectives", "--hosts", "2"}, dir_),
                              "--hosts: simulated hosts are for --hierarchical");
}

}  // namespace

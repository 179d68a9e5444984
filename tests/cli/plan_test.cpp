#include <gtest/gtest.h>

#include "tests/cli/cli_util.h"
#include "tests/temp_folder.h"

namespace {

using namespace cli_util;

class PlanCommand : public quartet::test_util::TempFolderTest {
 protected:
  PlanCommand() : TempFolderTest("quartet_plan") {}
  static std::string source(const std::string& path) {
    return (fs::path(QUARTET_TEST_DATA_DIR).parent_path().parent_path() / path).string();
  }
};

TEST_F(PlanCommand, QuickstartOnDgxH100FitsEightyColumns) {
  const Result r = cli_util::quartet({"plan", source("experiments/quickstart.json"), "--cluster", source("clusters/dgx-h100.json")}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const std::string arm : {"single", "accum-4", "ddp-2", "split-4", "fedavg-10"})
    EXPECT_NE(r.out.find("\n" + arm + " "), std::string::npos) << arm << "\n" << r.out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    size_t shown = 0;
    for (const unsigned char ch : line) shown += (ch & 0xC0) != 0x80;
    EXPECT_LE(shown, 80u) << line;
  }
}

TEST_F(PlanCommand, JsonHasEveryArmWithTimeMemoryAndTraffic) {
  const Result r = cli_util::quartet(
      {"plan", source("experiments/zero-memory.json"), "--cluster", source("clusters/a100.json"), "--devices", "8", "--json"},
      dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["devices"], 8);
  ASSERT_EQ(j["arms"].size(), 7u);
  for (const json& arm : j["arms"]) {
    EXPECT_GT(arm["step_seconds"].get<double>(), 0.0) << arm.dump();
    EXPECT_GT(arm["memory_bytes"]["total"].get<double>(), 0.0);
    EXPECT_TRUE(arm["bytes_per_step"].contains("inter_node"));
  }
  // ZeRO 3 shards the parameters over the 2 ranks: half of stage 0's.
  EXPECT_NEAR(j["arms"][4]["memory_bytes"]["parameters"].get<double>() * 2,
              j["arms"][1]["memory_bytes"]["parameters"].get<double>(), 1.0);
}

TEST_F(PlanCommand, ABadClusterFieldIsNamedWithExitTwo) {
  std::ofstream(dir_ / "bad.json") << R"({"name": "x", "nodes": -1})";
  expect_exit2_with(cli_util::quartet({"plan", source("experiments/quickstart.json"), "--cluster", (dir_ / "bad.json").string()}, dir_),
                    "--cluster: " + (dir_ / "bad.json").string() + ".nodes: expected an integer ≥ 1, got -1");
  expect_exit2_with(cli_util::quartet({"plan", source("experiments/quickstart.json"), "--cluster", source("clusters/dgx-h100.json"),
                             "--devices", "17"},
                            dir_),
                    "--devices: 17 is more than dgx-h100's 16 devices");
}

}  // namespace

namespace {

using namespace cli_util;

class PlanCheck : public quartet::test_util::TempFolderTest {
 protected:
  PlanCheck() : TempFolderTest("quartet_plan_check") {}
};

// A finished run's arms predicted from a calibrated profile beside what they measured.
TEST_F(PlanCheck, PrintsPredictedMeasuredAndTheErrorOfEveryArm) {
  const fs::path spec = dir_ / "spec.json", run = dir_ / "run", profile = dir_ / "here.json";
  std::ofstream(spec) << R"({
      "name": "check", "workload": {"name": "synthetic", "model": "mlp", "train_samples": 256, "test_samples": 64},
      "seed": 3, "threads": 1, "train": {"epochs": 1, "batch": 32, "optimizer": {"lr": 0.05}},
      "arms": [{"name": "single", "regime": "single"}, {"name": "acc", "regime": "accumulate", "micro_batches": 2}]})";
  ASSERT_EQ(cli_util::quartet({"run", spec.string(), "--out", run.string(), "--progress", "none"}, dir_).code, 0);
  ASSERT_EQ(cli_util::quartet({"calibrate", "--quick", "--out", profile.string()}, dir_).code, 0);
  const Result r = cli_util::quartet({"plan", "--check", run.string(), "--cluster", profile.string()}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\nsingle  single "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nacc     accumulate "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Median |error| over 2 arms: "), std::string::npos) << r.out;
  // The report's Markdown carries the same table.
  ASSERT_EQ(cli_util::quartet({"report", run.string(), "--format", "md", "--cluster", profile.string(), "-q"}, dir_).code, 0);
  const std::string md = file_bytes(run / "report" / "report.md");
  EXPECT_NE(md.find("## Predicted beside measured"), std::string::npos);
  EXPECT_NE(md.find("| single | single | "), std::string::npos) << md;
  // A profile that is no profile is refused before anything is written.
  const fs::path bad = dir_ / "bad.json";
  std::ofstream(bad) << "{\"name\": 3}";
  expect_exit2_with(cli_util::quartet({"report", run.string(), "--format", "md", "--cluster", bad.string()}, dir_),
                    "quartet report: --cluster: ");
}

TEST_F(PlanCheck, AFolderThatIsNoRunIsRefused) {
  expect_exit2_with(cli_util::quartet({"plan", "--check", dir_.string(), "--cluster",
                                       (fs::path(QUARTET_TEST_DATA_DIR).parent_path().parent_path() /
                                        "clusters/cpu-10gbe.json")
                                           .string()},
                                      dir_),
                    "--check: " + dir_.string());
}

}  // namespace

namespace {

using namespace cli_util;

class PlanSearch : public quartet::test_util::TempFolderTest {
 protected:
  PlanSearch() : TempFolderTest("quartet_plan_search") {}
};

// gpt-mini on two DGX H100s: meshes ranked, and the top rows written as an experiment
// file quartet validates: one regime's arms, and mesh arms for several axes; a setting
// the build does not train (ZeRO 3 in a mesh) left out with the reason.
TEST_F(PlanSearch, RanksMeshesAndWritesAReadyExperiment) {
  const fs::path root = fs::path(QUARTET_TEST_DATA_DIR).parent_path().parent_path();
  const fs::path out = dir_ / "planned.json";
  const Result r = cli_util::quartet({"plan", (root / "experiments/text-lm.json").string(), "--cluster",
                                      (root / "clusters/dgx-h100.json").string(), "--search", "--top", "40", "--out",
                                      out.string()},
                                     dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("search for gpt-mini, batch 32, on dgx-h100 (16 devices)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n 1  "), std::string::npos) << r.out;
  const Result valid = cli_util::quartet({"validate", out.string()}, dir_);
  EXPECT_EQ(valid.code, 0) << valid.out;
  EXPECT_NE(valid.out.find("text-lm-planned"), std::string::npos) << valid.out;
  const std::string planned = file_bytes(out);
  EXPECT_NE(planned.find("\"regime\": \"data_parallel\""), std::string::npos) << planned;
  EXPECT_NE(planned.find("\"regime\": \"mesh\""), std::string::npos) << planned;
  EXPECT_NE(planned.find("\"name\": \"dp8-tp2-z1\""), std::string::npos) << planned;
  const size_t left_out = r.out.find("left out, as this build does not train them:\n");
  ASSERT_NE(left_out, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  dp8×tp2-z3: ", left_out), std::string::npos) << r.out;
}

TEST_F(PlanSearch, OutWithoutSearchIsRefused) {
  const fs::path root = fs::path(QUARTET_TEST_DATA_DIR).parent_path().parent_path();
  expect_exit2_with(cli_util::quartet({"plan", (root / "experiments/text-lm.json").string(), "--cluster",
                                       (root / "clusters/dgx-h100.json").string(), "--out", (dir_ / "x.json").string()},
                                      dir_),
                    "--out: only with --search");
}

}  // namespace

// A run folder has one writer and is made whole or not at all: a second `quartet run
// --resume` of a folder whose run is going is refused naming the first's pid; a run whose
// set-up fails leaves no folder; bad input that only the run finds (an --out that cannot
// be made, a batch larger than the data) exits with code 2.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;
using cli_util::expect_exit2_with;
using cli_util::file_bytes;
using cli_util::quartet;
using nlohmann::json;

class RunFolder : public quartet::test_util::TempFolderTest {
 protected:
  RunFolder() : TempFolderTest("run_folder") {}

  fs::path write_spec(const json& train, int64_t train_samples = 256) {
    const json spec = {{"name", "one-writer"},
                       {"workload",
                        {{"name", "synthetic"}, {"model", "mlp"}, {"train_samples", train_samples}, {"test_samples", 64}}},
                       {"threads", 1},
                       {"train", train},
                       {"arms", json::array({{{"name", "single"}, {"regime", "single"}}})}};
    const fs::path p = dir_ / "spec.json";
    std::ofstream(p) << spec.dump(2);
    return p;
  }
};

TEST_F(RunFolder, ASecondWriterIsRefusedNamingTheFirst) {
  const fs::path spec = write_spec({{"epochs", 100000}, {"batch", 32}});
  const fs::path run = dir_ / "run";
  const pid_t first = cli_util::start_quartet({"run", spec.string(), "--out", run.string(), "--progress=none"},
                                              dir_ / "first.log");
  // Once the first run trains, its folder is locked.
  ASSERT_FALSE(cli_util::wait_for_line(run / "single" / "roles" / "trainer.jsonl", "\"type\":\"step\"",
                                       std::chrono::seconds(120))
                   .empty())
      << file_bytes(dir_ / "first.log");
  expect_exit2_with(quartet({"run", "--resume", run.string(), "--progress=none"}, dir_),
                    "in use by another quartet run (pid " + std::to_string(first) + ")");
  expect_exit2_with(quartet({"run", spec.string(), "--out", run.string()}, dir_), "exists; a run folder is never");
  kill(first, SIGINT);
  EXPECT_EQ(cli_util::wait_exit_within(first, std::chrono::seconds(120)), 130) << file_bytes(dir_ / "first.log");
  // Its records are its own: one line per step, none written twice.
  int64_t last = 0;
  std::ifstream in(run / "single" / "roles" / "trainer.jsonl");
  for (std::string line; std::getline(in, line);) {
    const int64_t step = json::parse(line)["step"].get<int64_t>();
    EXPECT_EQ(step, last + 1);
    last = step;
  }
}

TEST_F(RunFolder, AFailedSetUpLeavesNoFolder) {
  const fs::path spec = write_spec({{"epochs", 1}, {"batch", 32}});
  std::ofstream(dir_ / "bad.safetensors") << "not weights";
  expect_exit2_with(quartet({"run", spec.string(), "--out", (dir_ / "run").string(), "--init",
                             (dir_ / "bad.safetensors").string()},
                            dir_),
                    "--init");
  EXPECT_FALSE(fs::exists(dir_ / "run"));
  // A folder without the run's files is not resumed, with a message, not a JSON error.
  fs::create_directories(dir_ / "empty");
  expect_exit2_with(quartet({"run", "--resume", (dir_ / "empty").string()}, dir_), "not a run folder (no spec.json");
}

TEST_F(RunFolder, BadInputTheRunFindsExitsWith2) {
  expect_exit2_with(quartet({"run", write_spec({{"epochs", 1}, {"batch", 32}}).string(), "--out",
                             "/proc/quartet-cannot-be-made/run"},
                            dir_),
                    "--out /proc/quartet-cannot-be-made/run: cannot make the run folder");
  expect_exit2_with(quartet({"run", write_spec({{"epochs", 1}, {"batch", 1000}}).string(), "--out",
                             (dir_ / "run").string()},
                            dir_),
                    "spec.arms[0].train.batch: 1000 is larger than the training set (256 samples)");
  // A quadrillion synthetic samples, all made up front, would end in std::bad_alloc.
  expect_exit2_with(quartet({"run", write_spec({{"epochs", 1}, {"batch", 32}}, int64_t{1000000000000000}).string(),
                             "--out", (dir_ / "run").string()},
                            dir_),
                    "spec.workload.train_samples: 788000000000050432 bytes of synthetic samples");
  EXPECT_FALSE(fs::exists(dir_ / "run"));
}

}  // namespace

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "tests/temp_folder.h"
#include "tests/trainers/trainer_test_util.h"
#include "engine/safetensors.h"
#include "trainers/training_loop.h"
#include "trainers/regime.h"
#include "workloads/workload.h"

namespace quartet::trainers {
namespace {

using testing::max_abs_diff;

namespace fs = std::filesystem;

class LocalLoop : public test_util::TempFolderTest {
 protected:
  LocalLoop() : TempFolderTest("local_loop") {}
  void SetUp() override {
    TempFolderTest::SetUp();
    workloads::WorkloadConfig wc;
    wc.name = "synthetic";
    wc.model = "lenet5";
    wc.train_limit = 512;
    wc.test_limit = 128;
    workload_ = workloads::make_workload(wc);
    init_ = dir_ / "init.safetensors";
    engine::save_safetensors(init_.string(), workload_->make_model("lenet5", 3)->state_dict());
  }

  RoleContext context(const std::string& arm, int64_t micro_batches, int64_t max_steps, int64_t epochs = 1) {
    RoleContext c;
    c.arm = arm;
    c.role = "trainer";
    c.arm_dir = dir_ / arm;
    fs::create_directories(c.arm_dir / "roles");
    c.init_weights = init_;
    c.model_name = "lenet5";
    c.config.batch = 64;
    c.config.max_steps = max_steps;
    c.config.epochs = epochs;
    c.config.eval_batch = 64;
    c.config.optimizer = {.name = "sgd", .lr = 0.05f, .momentum = 0.9f};
    c.config.seed = 5;
    c.workload = workload_.get();
    c.settings = micro_batches > 1
                     ? testing::regime_settings("accumulate", c, {{"micro_batches", micro_batches}})
                     : testing::regime_settings("single", c);
    return c;
  }

  engine::NamedTensors final_weights(const std::string& arm) {
    return engine::load_safetensors(final_weights_path(dir_ / arm).string());
  }

  fs::path init_;
  std::unique_ptr<workloads::Workload> workload_;
};

// Accumulating k micro-batches computes the same update as one batch: the same
// parameters after several steps, up to float summation order. Tolerance: 1e-5 absolute
// on weights of magnitude ~0.1 after 6 SGD steps with momentum.
TEST_F(LocalLoop, AccumulateFourMicroBatchesEqualsOneBatch) {
  find_regime("single").run_role(context("single", 1, 6));
  find_regime("accumulate").run_role(context("acc4", 4, 6));
  const double diff = max_abs_diff(final_weights("single"), final_weights("acc4"));
  EXPECT_LT(diff, 1e-5);
  // And training moved the weights, so the comparison means something.
  EXPECT_GT(max_abs_diff(final_weights("single"), engine::load_safetensors(init_.string())), 1e-3);
}

TEST_F(LocalLoop, SameSeedGivesBitwiseIdenticalWeights) {
  find_regime("single").run_role(context("a", 1, 5));
  find_regime("single").run_role(context("b", 1, 5));
  EXPECT_EQ(max_abs_diff(final_weights("a"), final_weights("b")), 0.0);
}

// The samples at which the arm's records carry an evaluation.
std::vector<int64_t> evaluated_at(const fs::path& arm_dir) {
  std::ifstream in(records_path(arm_dir, "trainer"));
  std::vector<int64_t> at;
  for (std::string line; std::getline(in, line);)
    if (const auto j = nlohmann::json::parse(line); j.contains("eval")) at.push_back(j["samples"].get<int64_t>());
  return at;
}

// A run of one epoch evaluates five times (eval_every 0): at the first step past each
// fifth of the epoch (512 / 5 -> every 103 samples), and at its end.
TEST_F(LocalLoop, WritesOneRecordPerStepAndEvaluatesFiveTimesInAnEpoch) {
  find_regime("single").run_role(context("rec", 1, 0, 1));  // one epoch: 512 / 64 = 8 steps
  std::ifstream in(records_path(dir_ / "rec", "trainer"));
  std::string line;
  int steps = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    ++steps;
    EXPECT_EQ(j["step"], steps);
    EXPECT_EQ(j["samples"], steps * 64);
    EXPECT_GT(j["memory"]["parameters"]["current"].get<int64_t>(), 0);
  }
  EXPECT_EQ(steps, 8);
  EXPECT_EQ(evaluated_at(dir_ / "rec"), (std::vector<int64_t>{128, 256, 320, 448, 512}));
  EXPECT_TRUE(fs::exists(checkpoint_path(dir_ / "rec")));
}

TEST_F(LocalLoop, EvalEveryPlacesTheEvaluationsAndEpochEndsKeepTheirs) {
  RoleContext c = context("every", 1, 0, 2);
  c.config.eval_every = 192;
  find_regime("single").run_role(c);
  // In each epoch of 512: past 192 and 384, and the end.
  EXPECT_EQ(evaluated_at(dir_ / "every"), (std::vector<int64_t>{192, 384, 512, 704, 896, 1024}));
  RoleContext whole = context("whole", 1, 0, 2);
  whole.config.eval_every = 512;
  find_regime("single").run_role(whole);
  EXPECT_EQ(evaluated_at(dir_ / "whole"), (std::vector<int64_t>{512, 1024}));  // once an epoch
}

TEST(EvalInterval, ShortRunsSplitTheirEpochsLongOnesEvaluateOnceAnEpoch) {
  TrainConfig c;
  c.epochs = 1;
  EXPECT_EQ(eval_interval(c, 60000), 12000);
  c.epochs = 2;
  EXPECT_EQ(eval_interval(c, 60000), 20000);  // three a epoch, six in all
  c.epochs = 5;
  EXPECT_EQ(eval_interval(c, 60000), 60000);
  c.eval_every = 1000;
  EXPECT_EQ(eval_interval(c, 60000), 1000);
  EXPECT_TRUE(evaluation_due(c, 60000, 896, 1024));
  EXPECT_FALSE(evaluation_due(c, 60000, 1024, 1152));
}

TEST_F(LocalLoop, RecordsTheScheduledLearningRateOfEveryStep) {
  RoleContext c = context("sched", 1, 5);
  c.config.schedule = {.name = "step", .step_size = 2, .gamma = 0.5f};
  find_regime("single").run_role(c);
  std::ifstream in(records_path(dir_ / "sched", "trainer"));
  std::string line;
  std::vector<float> lrs;
  while (std::getline(in, line)) lrs.push_back(nlohmann::json::parse(line)["lr"].get<float>());
  EXPECT_EQ(lrs, (std::vector<float>{0.05f, 0.05f, 0.025f, 0.025f, 0.0125f}));
}

TEST_F(LocalLoop, AdamArmTrainsAndChangesTheWeights) {
  RoleContext c = context("adam", 1, 4);
  c.config.optimizer = {.name = "adam", .lr = 1e-3f};
  find_regime("single").run_role(c);
  EXPECT_GT(max_abs_diff(final_weights("adam"), engine::load_safetensors(init_.string())), 1e-4);
}

// A run resumed from its first checkpoint ends where an uninterrupted run ends.
TEST_F(LocalLoop, ResumeFromCheckpointGivesTheSameFinalWeights) {
  find_regime("single").run_role(context("whole", 1, 0, 3));
  // One epoch, then "crash": keep the checkpoint, continue for the remaining epochs.
  find_regime("single").run_role(context("parts", 1, 0, 1));
  fs::remove(final_weights_path(dir_ / "parts"));
  RoleContext rest = context("parts", 1, 0, 3);
  rest.resume = true;
  find_regime("single").run_role(rest);
  EXPECT_EQ(max_abs_diff(final_weights("whole"), final_weights("parts")), 0.0);
  // The resumed record file has no duplicated steps: 3 epochs of 8 steps.
  std::ifstream in(records_path(dir_ / "parts", "trainer"));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) EXPECT_EQ(nlohmann::json::parse(line)["step"], ++n);
  EXPECT_EQ(n, 24);
}

}  // namespace
}  // namespace quartet::trainers

// The regimes on volumes: unet3d on phantom CT patches. The segmentation loss is a mean
// over samples (per-sample Dice + per-voxel cross-entropy) and InstanceNorm normalises
// each sample alone, so micro-batches and ranks compute single's update, as on images.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>

#include "tests/temp_folder.h"
#include "tests/trainers/trainer_test_util.h"
#include "engine/safetensors.h"
#include "trainers/regime.h"
#include "transport/coordinator.h"
#include "workloads/workload.h"

namespace quartet::trainers {
namespace {

using testing::max_abs_diff;

namespace fs = std::filesystem;
using nlohmann::json;

class VolumeRegimes : public test_util::TempFolderTest {
 protected:
  VolumeRegimes() : TempFolderTest("volume_regimes") {}
  static void SetUpTestSuite() { ::setenv("QUARTET_GLOO_TIMEOUT_S", "120", 0); }

  void SetUp() override {
    TempFolderTest::SetUp();
    workloads::WorkloadConfig wc;
    wc.name = "phantom-ct-seg";
    wc.model = "unet3d";
    wc.volumes = 6;
    wc.test_volumes = 2;
    wc.volume_size = 32;
    wc.patch = 16;
    wc.seed = 2;
    workload_ = workloads::make_workload(wc);
    init_ = dir_ / "init.safetensors";
    engine::save_safetensors(init_.string(), workload_->make_model("unet3d", 3)->state_dict());
  }

  RoleContext context(const std::string& arm, int64_t micro_batches, int ranks = 1) {
    RoleContext c;
    c.arm = arm;
    c.role = "trainer";
    c.arm_dir = dir_ / arm;
    fs::create_directories(c.arm_dir / "roles");
    c.init_weights = init_;
    c.model_name = "unet3d";
    c.config.batch = 4;
    c.config.epochs = 2;  // 4 training volumes: one step an epoch
    c.config.max_steps = 2;
    c.config.eval_batch = 4;
    c.config.optimizer = {.name = "sgd", .lr = 0.05f, .momentum = 0.9f};
    c.config.seed = 5;
    c.workload = workload_.get();
    if (ranks > 1) c.settings = testing::regime_settings("data_parallel", c, {{"ranks", ranks}, {"bucket_mb", 0.5}});
    else if (micro_batches > 1) c.settings = testing::regime_settings("accumulate", c, {{"micro_batches", micro_batches}});
    else c.settings = testing::regime_settings("single", c);
    return c;
  }


  engine::NamedTensors final_weights(const std::string& arm) {
    return engine::load_safetensors(final_weights_path(dir_ / arm).string());
  }


  std::vector<json> records(const std::string& arm, const std::string& role) {
    return testing::read_records(dir_ / arm, role);
  }

  fs::path init_;
  std::unique_ptr<workloads::Workload> workload_;
};

// Float sums in another order over 2 SGD steps on weights of magnitude ~0.1.
constexpr double kSameUpdate = 1e-5;

TEST_F(VolumeRegimes, AccumulateTwoMicroBatchesEqualsOneBatch) {
  find_regime("single").run_role(context("single", 1));
  find_regime("accumulate").run_role(context("accum", 2));
  const double diff = max_abs_diff(final_weights("single"), final_weights("accum"));
  std::cout << "[ measured ] accumulate 2 vs single: max |param diff| = " << diff << "\n";
  EXPECT_LT(diff, kSameUpdate);
  EXPECT_GT(max_abs_diff(final_weights("single"), engine::load_safetensors(init_.string())), 1e-4);
}

TEST_F(VolumeRegimes, TwoRanksEqualSingle) {
  find_regime("single").run_role(context("single", 1));
  testing::run_data_parallel_ranks(context("ddp2", 1, 2));
  const double diff = max_abs_diff(final_weights("single"), final_weights("ddp2"));
  std::cout << "[ measured ] data_parallel 2 vs single: max |param diff| = " << diff << "\n";
  EXPECT_LT(diff, kSameUpdate);
}

int64_t peak_activations(const std::vector<json>& records) {
  int64_t peak = 0;
  for (const json& r : records) peak = std::max(peak, r["memory"]["activations"]["peak"].get<int64_t>());
  return peak;
}

// Activation checkpointing recomputes each stage in backward from its saved inputs: the
// same update (float rounding), a lower activation peak.
TEST_F(VolumeRegimes, CheckpointedSingleEqualsSingleWithLessActivationMemory) {
  find_regime("single").run_role(context("single", 1));
  RoleContext c = context("ckpt", 1);
  c.config.checkpoint = true;
  find_regime("single").run_role(c);
  const double diff = max_abs_diff(final_weights("single"), final_weights("ckpt"));
  std::cout << "[ measured ] checkpointed vs single: max |param diff| = " << diff << "\n";
  EXPECT_LT(diff, kSameUpdate);
  const int64_t plain = peak_activations(records("single", "trainer")),
                ckpt = peak_activations(records("ckpt", "trainer"));
  std::cout << "[ measured ] activation peak: single " << plain << " B, checkpointed " << ckpt << " B\n";
  EXPECT_LT(ckpt * 10, plain * 7);
}

// The nested backward of each recomputed stage fires the parameters' grad-ready hooks,
// which drive data_parallel's buckets; ZeRO-2 drops each gradient once it is bucketed.
TEST_F(VolumeRegimes, CheckpointedTwoRanksWithZero2EqualSingle) {
  find_regime("single").run_role(context("single", 1));
  RoleContext c = context("ddp2", 1, 2);
  c.config.checkpoint = true;
  c.settings = testing::regime_settings("data_parallel", c, {{"ranks", 2}, {"bucket_mb", 0.5}, {"zero", 2}});
  testing::run_data_parallel_ranks(c);
  const double diff = max_abs_diff(final_weights("single"), final_weights("ddp2"));
  std::cout << "[ measured ] checkpointed data_parallel 2 (zero 2) vs single: max |param diff| = " << diff << "\n";
  EXPECT_LT(diff, kSameUpdate);
}

// The last step's record carries the held-out volumes' mean Dice.
TEST_F(VolumeRegimes, SingleRecordsTheDiceOfTheHeldOutVolumes) {
  find_regime("single").run_role(context("single", 1));
  const std::vector<json> r = records("single", "trainer");
  ASSERT_EQ(r.size(), 2u);
  ASSERT_TRUE(r.back().contains("eval")) << r.back().dump();
  EXPECT_EQ(r.back()["eval"]["metric"], "dice");
  EXPECT_EQ(r.back()["eval"]["samples"], 2);
  EXPECT_GE(r.back()["eval"]["value"].get<double>(), 0.0);
  EXPECT_LE(r.back()["eval"]["value"].get<double>(), 1.0);
}

}  // namespace
}  // namespace quartet::trainers

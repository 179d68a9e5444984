// tensor_parallel with ranks as threads of one process, over a real coordinator on
// 127.0.0.1 and shared memory or Gloo, as the processes of `quartet run` do it: gpt-mini
// on a small byte corpus, against single.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "engine/safetensors.h"
#include "tests/temp_folder.h"
#include "tests/trainers/trainer_test_util.h"
#include "trainers/regime.h"
#include "workloads/models.h"
#include "workloads/workload.h"

namespace quartet::trainers {
namespace {

using testing::max_abs_diff;
using nlohmann::json;

class TensorParallel : public testing::RanksOnTextTest {
 protected:
  TensorParallel() : RanksOnTextTest("tensor_parallel", "gpt-mini", 7) {}
  static void SetUpTestSuite() { ::setenv("QUARTET_GLOO_TIMEOUT_S", "120", 0); }
};

// Tolerance for "the same update": the ranks' partial sums added in another order than
// one process's matrix products, over 3 SGD steps with momentum; the data_parallel tests'.
constexpr double kSameUpdate = 2e-6;

TEST_F(TensorParallel, TwoAndFourRanksEqualSingle) {
  run_single();
  for (int64_t ranks : {2, 4}) EXPECT_LT(diff_from_single("tp" + std::to_string(ranks), ranks), kSameUpdate);
  EXPECT_GT(max_abs_diff(final_weights("single"), engine::load_safetensors(init_.string())), 1e-3);
}

TEST_F(TensorParallel, GlooEqualsSingleAndEveryBlockAllReducesTwiceEachWay) {
  run_single();
  EXPECT_LT(diff_from_single("tp2", 2, json{{"backend", "gloo"}}), kSameUpdate);
  for (const char* role : {"rank0", "rank1"}) {
    int steps = 0;
    for (const json& r : records("tp2", role)) {
      if (r.value("type", "") != "step") continue;
      ++steps;
      // 4 blocks x (attention, MLP) x (forward, backward), each of the (4, 128, 128)
      // activations: a ring all-reduce of S bytes over 2 ranks sends S per rank.
      EXPECT_EQ(r["comm"]["messages"], 16 * 2) << "two ring messages per all-reduce on 2 ranks";
      EXPECT_EQ(r["comm"]["bytes"], 16 * 4 * 128 * 128 * 4);
      EXPECT_EQ(r["comm"]["backend"], "gloo");
    }
    EXPECT_EQ(steps, 3) << role;
  }
  // Rank 0 alone evaluates, once, at the (capped) epoch's end.
  const auto evaluations = [&](const char* role) {
    int n = 0;
    for (const json& r : records("tp2", role)) n += r.contains("eval") ? 1 : 0;
    return n;
  };
  EXPECT_EQ(evaluations("rank0"), 1);
  EXPECT_EQ(evaluations("rank1"), 0);
}

TEST_F(TensorParallel, ClippingByTheWholeModelsNormEqualsSingle) {
  RoleContext single = context("single", 0);
  single.config.clip_grad_norm = 0.5;
  testing::run_role("single", single);
  RoleContext tp = context("tp2", 2);
  tp.config.clip_grad_norm = 0.5;
  tp.settings = testing::regime_settings("tensor_parallel", tp, {{"ranks", 2}});
  testing::run_roles_as_threads("tensor_parallel", tp);
  EXPECT_LT(max_abs_diff(final_weights("single"), final_weights("tp2")), kSameUpdate);
}

// Adam and AdamW at their own tolerance (testing::kAdamSameUpdate): gpt-mini's attention
// key bias has a gradient that is zero by the maths (softmax ignores a constant added to
// every score), whose rounding noise Adam scales up. gpt-mini under data_parallel too.
TEST_F(TensorParallel, AdamEqualsSingleWithinAdamsTolerance) {
  using testing::kAdamSameUpdate;
  for (const std::string optimizer : {"adam", "adamw"}) {
    auto adam = [&](RoleContext c) {
      c.config.optimizer = {.name = optimizer, .lr = 1e-3f, .weight_decay = optimizer == "adamw" ? 0.01 : 0.0};
      return c;
    };
    testing::run_role("single", adam(context(optimizer + "-single", 0)));
    for (int64_t ranks : {2, 4}) {
      const std::string arm = optimizer + "-tp" + std::to_string(ranks);
      RoleContext tp = adam(context(arm, 0));
      tp.settings = testing::regime_settings("tensor_parallel", tp, {{"ranks", ranks}});
      testing::run_roles_as_threads("tensor_parallel", tp);
      const double diff = max_abs_diff(final_weights(optimizer + "-single"), final_weights(arm));
      std::cout << "[ measured ] tensor_parallel " << ranks << " ranks vs single, " << optimizer
                << ": max |param diff| = " << diff << "\n";
      EXPECT_LT(diff, kAdamSameUpdate) << optimizer << ", " << ranks << " ranks";
      const std::string ddp = optimizer + "-ddp" + std::to_string(ranks);
      RoleContext dp = adam(context(ddp, 0));
      dp.settings = testing::regime_settings("data_parallel", dp, {{"ranks", ranks}});
      testing::run_roles_as_threads("data_parallel", dp);
      const double dp_diff = max_abs_diff(final_weights(optimizer + "-single"), final_weights(ddp));
      std::cout << "[ measured ] data_parallel " << ranks << " ranks vs single, " << optimizer
                << ": max |param diff| = " << dp_diff << "\n";
      EXPECT_LT(dp_diff, kAdamSameUpdate) << optimizer << ", data_parallel " << ranks << " ranks";
    }
  }
}

// Each rank checkpoints its own slices and optimizer state at every epoch's end; an arm
// that stops after one epoch and resumes ends where one that never stopped does.
TEST_F(TensorParallel, ResumeFromCheckpointsGivesTheSameFinalWeights) {
  expect_resume_bit_for_bit();
}

// Sequence parallelism changes where the sums happen, not what they sum.
TEST_F(TensorParallel, SequenceParallelTwoAndFourRanksEqualSingle) {
  run_single();
  for (int64_t ranks : {2, 4})
    EXPECT_LT(diff_from_single("sp" + std::to_string(ranks), ranks, json{{"sequence_parallel", true}}), kSameUpdate);
}

// Per block, forward and backward, two all-gathers and two reduce-scatters of the
// (4, 128, 128) activations replace the two all-reduces, and backward gathers the two
// column-parallel layers' inputs again: ten collectives of (N-1)/N of S each, where
// tensor parallelism sends four of 2 (N-1)/N; then the whole parameters' gradients are
// summed once.
TEST_F(TensorParallel, SequenceParallelGatherAndScatterMoveTheAllReducesBytes) {
  run_single();
  EXPECT_LT(diff_from_single("sp2", 2, json{{"backend", "gloo"}, {"sequence_parallel", true}}), kSameUpdate);
  int64_t whole_floats = 0, whole_tensors = 0;
  const engine::NamedTensors init = engine::load_safetensors(init_.string());
  for (const auto& [name, split] : workloads::tensor_parallel_plan("gpt-mini")) {
    if (split != workloads::TensorSplit::whole) continue;
    for (const auto& [n, t] : init)
      if (n == name) whole_floats += t.numel();
    ++whole_tensors;
  }
  EXPECT_EQ(whole_tensors, 22);
  for (const char* role : {"rank0", "rank1"}) {
    int steps = 0;
    for (const json& r : records("sp2", role)) {
      if (r.value("type", "") != "step") continue;
      ++steps;
      EXPECT_EQ(r["comm"]["bytes"], 40 * 4 * 128 * 128 * 4 / 2 + whole_floats * 4) << role;
      EXPECT_EQ(r["comm"]["messages"], 40 + 2 * whole_tensors) << role;
      EXPECT_EQ(r["comm"]["sequence_parallel"], true);
    }
    EXPECT_EQ(steps, 3) << role;
  }
}

TEST_F(TensorParallel, RanksThatDoNotDivideTheHeadsAreRefused) {
  try {
    context("tp3", 3);
    FAIL() << "3 ranks over 4 heads were accepted";
  } catch (const SettingsError& e) {
    EXPECT_NE(std::string(e.what()).find("do not divide gpt-mini's 4 heads"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace quartet::trainers

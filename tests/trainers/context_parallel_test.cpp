// context_parallel with ranks as threads of one process, over a real coordinator on
// 127.0.0.1 and shared memory or Gloo, as the processes of `quartet run` do it: gpt-mini
// (context 128) on a small byte corpus, against single.

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

class ContextParallel : public testing::RanksOnTextTest {
 protected:
  ContextParallel() : RanksOnTextTest("context_parallel", "gpt-mini", 11) {}
  static void SetUpTestSuite() { ::setenv("QUARTET_GLOO_TIMEOUT_S", "120", 0); }
};

// Tolerance for "the same update": the ranks' gradients of their tokens averaged, and the
// attention's blocks merged by their log-sum-exp, in another order than one process's
// sums, over 3 SGD steps with momentum; the data_parallel tests'.
constexpr double kSameUpdate = 2e-6;

TEST_F(ContextParallel, TwoAndFourRanksEqualSingle) {
  run_single();
  for (int64_t ranks : {2, 4}) EXPECT_LT(diff_from_single("cp" + std::to_string(ranks), ranks), kSameUpdate);
  EXPECT_GT(max_abs_diff(final_weights("single"), engine::load_safetensors(init_.string())), 1e-3);
}

// Per layer, the ring moves (3N - 2) blocks of 2 B (T/N) W floats from each rank: N - 1
// of keys and values forward, N - 1 again backward and N of their gradients behind them;
// the gradients' all-reduce over 2 ranks sends every parameter's 4 bytes once.
TEST_F(ContextParallel, GlooEqualsSingleAndCountsTheRingsBlocksByTheFormula) {
  run_single();
  const int64_t n = 2, layers = 4, batch = 4, seq = 128, width = 128;
  EXPECT_LT(diff_from_single("cp2", n, json{{"backend", "gloo"}}), kSameUpdate);
  const int64_t block_bytes = 2 * batch * (seq / n) * width * 4;
  const int64_t params = workloads::parameter_count(*workload_->make_model("gpt-mini", 1));
  for (const char* role : {"rank0", "rank1"}) {
    int steps = 0;
    for (const json& r : records("cp2", role)) {
      if (r.value("type", "") != "step") continue;
      ++steps;
      EXPECT_EQ(r["comm"]["ring_bytes"], layers * (3 * n - 2) * block_bytes) << role;
      EXPECT_EQ(r["comm"]["ring_messages"], layers * (3 * n - 2)) << role;
      EXPECT_EQ(r["comm"]["gradient_bytes"], params * 4) << role;
      EXPECT_EQ(r["comm"]["bytes"], layers * (3 * n - 2) * block_bytes + params * 4) << role;
      EXPECT_EQ(r["comm"]["backend"], "gloo");
    }
    EXPECT_EQ(steps, 3) << role;
  }
  const auto evaluations = [&](const char* role) {
    int count = 0;
    for (const json& r : records("cp2", role)) count += r.contains("eval") ? 1 : 0;
    return count;
  };
  EXPECT_EQ(evaluations("rank0"), 1);
  EXPECT_EQ(evaluations("rank1"), 0);
}

TEST_F(ContextParallel, AdamEqualsSingleWithinAdamsTolerance) {
  auto adam = [&](RoleContext c) {
    c.config.optimizer = {.name = "adam", .lr = 1e-3f};
    return c;
  };
  testing::run_role("single", adam(context("adam-single", 0)));
  RoleContext cp = adam(context("adam-cp4", 0));
  cp.settings = testing::regime_settings("context_parallel", cp, {{"ranks", 4}});
  testing::run_roles_as_threads("context_parallel", cp);
  const double diff = max_abs_diff(final_weights("adam-single"), final_weights("adam-cp4"));
  std::cout << "[ measured ] context_parallel 4 ranks vs single, adam: max |param diff| = " << diff << "\n";
  EXPECT_LT(diff, testing::kAdamSameUpdate);
}

// Rank 0 checkpoints at every epoch's end, every rank resumes from it; an arm that stops
// after one epoch and resumes ends where one that never stopped does.
TEST_F(ContextParallel, ResumeFromCheckpointsGivesTheSameFinalWeights) {
  expect_resume_bit_for_bit();
}

TEST_F(ContextParallel, RanksWhoseDoubleDoesNotDivideTheContextAreRefused) {
  try {
    context("cp3", 3);
    FAIL() << "3 ranks (6 chunks) over a context of 128 were accepted";
  } catch (const SettingsError& e) {
    EXPECT_NE(std::string(e.what()).find("3 ranks cut gpt-mini's context of 128 into 2 x ranks = 6 chunks"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace quartet::trainers

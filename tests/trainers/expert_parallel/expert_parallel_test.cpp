// expert_parallel with ranks as threads of one process, over a real coordinator on
// 127.0.0.1 and shared memory or Gloo, as the processes of `quartet run` do it:
// gpt-moe-dropless (no token dropped, no balance loss) on a small byte corpus, against
// single; the all-to-all bytes in the records against their formula; resume; refusals.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "engine/safetensors.h"
#include "tests/trainers/trainer_test_util.h"
#include "trainers/regime.h"
#include "workloads/workload.h"

namespace quartet::trainers {
namespace {

using nlohmann::json;
using testing::max_abs_diff;

class ExpertParallel : public testing::RanksOnTextTest {
 protected:
  ExpertParallel() : RanksOnTextTest("expert_parallel", "gpt-moe-dropless", 11) {}
  static void SetUpTestSuite() { ::setenv("QUARTET_GLOO_TIMEOUT_S", "120", 0); }
};

// data_parallel's tolerance: the same gradients added in another order, 3 SGD steps.
constexpr double kSameUpdate = 2e-6;

TEST_F(ExpertParallel, TwoAndFourRanksEqualSingle) {
  run_single();
  for (int64_t ranks : {2, 4}) {
    const std::string arm = "ep" + std::to_string(ranks);
    testing::run_roles_as_threads("expert_parallel", context(arm, ranks));
    const double diff = max_abs_diff(final_weights("single"), final_weights(arm));
    std::cout << "[ measured ] expert_parallel " << ranks << " ranks vs single: max |param diff| = " << diff << "\n";
    EXPECT_LT(diff, kSameUpdate) << ranks << " ranks";
  }
  EXPECT_GT(max_abs_diff(final_weights("single"), engine::load_safetensors(init_.string())), 1e-3);
}

// Per step and rank r, over the MoE blocks: r sends D_r rows to other ranks' experts
// (dispatch) and R_r rows back to their senders (combine), and backward sends the same
// counts the other way: 2 (D_r + R_r) rows of 128 floats, plus each block's count table
// (E/N floats to each of N-1 peers). load[e] in r's record: rows r routed to expert e.
TEST_F(ExpertParallel, GlooEqualsSingleAndTheAllToAllBytesAreTheFormulas) {
  run_single();
  testing::run_roles_as_threads("expert_parallel", context("ep2", 2, json{{"backend", "gloo"}}));
  EXPECT_LT(max_abs_diff(final_weights("single"), final_weights("ep2")), kSameUpdate);
  std::vector<std::vector<json>> steps(2);
  for (int r = 0; r < 2; ++r)
    for (const json& rec : records("ep2", "rank" + std::to_string(r)))
      if (rec.value("type", "") == "step") steps[static_cast<size_t>(r)].push_back(rec);
  ASSERT_EQ(steps[0].size(), 3u);
  ASSERT_EQ(steps[1].size(), 3u);
  for (size_t s = 0; s < 3; ++s)
    for (int r = 0; r < 2; ++r) {
      const json& mine = steps[static_cast<size_t>(r)][s];
      const json& other = steps[static_cast<size_t>(1 - r)][s];
      // 2 samples of 128 tokens, top-2, two MoE blocks.
      EXPECT_EQ(mine["moe"]["choices"], 2 * 128 * 2 * 2);
      EXPECT_EQ(mine["moe"]["dropped"], 0);
      int64_t sent = 0, received = 0;
      for (int e = 0; e < 4; ++e) {
        const bool mine_expert = e / 2 == r;
        if (!mine_expert) sent += mine["moe"]["load"][e].get<int64_t>();
        if (mine_expert) received += other["moe"]["load"][e].get<int64_t>();
      }
      const int64_t expected = 2 * (sent + received) * 128 * 4 + 2 * 4 * 2 * 1;
      EXPECT_EQ(mine["comm"]["all_to_all_bytes"], expected) << "rank " << r << " step " << s;
      EXPECT_EQ(mine["comm"]["backend"], "gloo");
    }
}

TEST_F(ExpertParallel, ClippingByTheWholeModelsNormEqualsSingle) {
  RoleContext single = context("single", 0);
  single.config.clip_grad_norm = 0.5;
  testing::run_role("single", single);
  RoleContext ep = context("ep2", 0);
  ep.config.clip_grad_norm = 0.5;
  ep.settings = testing::regime_settings("expert_parallel", ep, {{"ranks", 2}});
  testing::run_roles_as_threads("expert_parallel", ep);
  EXPECT_LT(max_abs_diff(final_weights("single"), final_weights("ep2")), kSameUpdate);
}

// Each rank checkpoints its own experts and optimizer state at every epoch's end; an arm
// that stops after one epoch and resumes ends where one that never stopped does.
TEST_F(ExpertParallel, ResumeFromCheckpointsGivesTheSameFinalWeights) {
  use_corpus(8);  // two steps of 4 an epoch
  auto ctx = [&](const std::string& arm, int64_t epochs) {
    RoleContext c = context(arm, 0);
    c.config.max_steps = 0;
    c.config.epochs = epochs;
    c.config.optimizer = {.name = "adam", .lr = 1e-3f};
    c.settings = testing::regime_settings("expert_parallel", c, {{"ranks", 2}});
    return c;
  };
  testing::run_roles_as_threads("expert_parallel", ctx("whole", 3));
  testing::run_roles_as_threads("expert_parallel", ctx("parts", 1));  // one epoch, then "crash"
  std::filesystem::remove(final_weights_path(dir_ / "parts"));
  RoleContext rest = ctx("parts", 3);
  rest.resume = true;
  testing::run_roles_as_threads("expert_parallel", rest);
  EXPECT_EQ(max_abs_diff(final_weights("whole"), final_weights("parts")), 0.0);
}

TEST_F(ExpertParallel, RanksThatDoNotDivideTheExpertsModelsWithoutExpertsAndUnevenBatchesAreRefused) {
  try {
    context("ep3", 3);
    FAIL() << "3 ranks over 4 experts were accepted";
  } catch (const SettingsError& e) {
    EXPECT_NE(std::string(e.what()).find("3 ranks do not divide gpt-moe-dropless's 4 experts"), std::string::npos)
        << e.what();
  }
  try {
    context("ep2x3", 2, json{{"micro_batches", 3}});
    FAIL() << "a batch of 4 over 2 ranks x 3 micro-batches was accepted";
  } catch (const SettingsError& e) {
    EXPECT_NE(std::string(e.what()).find("the batch 4 does not split into 2 ranks x 3 micro-batches"),
              std::string::npos)
        << e.what();
  }
  use_corpus(0, "gpt-mini");
  try {
    context("mini", 2);
    FAIL() << "gpt-mini was accepted";
  } catch (const SettingsError& e) {
    EXPECT_NE(std::string(e.what()).find("model gpt-mini has no experts; models that have them: gpt-moe"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace quartet::trainers

// Models imported from ONNX under the regimes that train the global model, as threads of
// one process. tests/data/onnx/tiny_cnn.onnx (convolutions, BatchNorm, a skip):
// data_parallel with SyncBatchNorm equals single, pipeline equals accumulate with the
// same micro-batches (BatchNorm's statistics are each micro-batch's). tiny_vit.onnx (a
// transformer, no BatchNorm): accumulate, data_parallel and pipeline equal single. Split
// and federated train both. Skipped in a build without the onnx library.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <iostream>
#include <string>

#include "engine/safetensors.h"
#include "tests/trainers/trainer_test_util.h"
#include "trainers/regime.h"
#include "workloads/onnx/model.h"
#include "workloads/workload.h"

namespace quartet::trainers {
namespace {

using nlohmann::json;
using testing::max_abs_diff;

class OnnxRegimes : public testing::RegimeTest {
 protected:
  explicit OnnxRegimes(std::string file = "tiny_cnn.onnx") : RegimeTest("onnx_regimes"), file_(std::move(file)) {}
  static void SetUpTestSuite() { ::setenv("QUARTET_GLOO_TIMEOUT_S", "120", 0); }

  void SetUp() override {
    if (!workloads::onnx::available()) GTEST_SKIP() << "this build reads no ONNX files (QUARTET_ONNX)";
    RegimeTest::SetUp();
    workloads::WorkloadConfig wc;
    wc.name = "synthetic";
    wc.model = std::string(workloads::onnx::kPrefix) + QUARTET_TEST_DATA_DIR + "/onnx/" + file_;
    wc.train_limit = 128;
    wc.test_limit = 32;
    use_workload(wc);
  }

  RoleContext context(const std::string& arm, const std::string& regime, json fields) {
    RoleContext c = RegimeTest::context(arm, 16, 3);
    c.config.eval_batch = 32;
    c.settings = testing::regime_settings(regime, c, std::move(fields));
    return c;
  }

  // Split and federated move the weights away from the initial ones, to finite values.
  void expect_trained(const std::vector<const char*>& arms) {
    for (const char* arm : arms) {
      const double moved = max_abs_diff(final_weights(arm), engine::load_safetensors(init_.string()));
      EXPECT_TRUE(std::isfinite(moved)) << arm;
      EXPECT_GT(moved, 1e-4) << arm;
    }
  }

  std::string file_;
};

class OnnxTransformerRegimes : public OnnxRegimes {
 protected:
  OnnxTransformerRegimes() : OnnxRegimes("tiny_vit.onnx") {}
};

TEST_F(OnnxRegimes, EachRegimeEqualsWhatItsOwnTestsHoldItTo) {
  find_regime("single").run_role(context("single", "single", json::object()));
  find_regime("accumulate").run_role(context("accumulate", "accumulate", {{"micro_batches", 2}}));
  testing::run_roles_as_threads("data_parallel",
                                context("dp2", "data_parallel", {{"ranks", 2}, {"backend", "shm"}, {"sync_bn", true}}));
  testing::run_roles_as_threads("pipeline",
                                context("pp2", "pipeline", {{"cuts", {"pool_MaxPool"}}, {"micro_batches", 2}}));
  const double dp = max_abs_diff(final_weights("single"), final_weights("dp2"));
  const double pp = max_abs_diff(final_weights("accumulate"), final_weights("pp2"));
  std::cout << "[ measured ] tiny_cnn.onnx dp2 (SyncBatchNorm) vs single: " << dp << ", pp2 vs accumulate: " << pp
            << "\n";
  EXPECT_LT(dp, 2e-5);  // the resnet-mini SyncBatchNorm test's bound
  EXPECT_LT(pp, 2e-6);
  EXPECT_GT(max_abs_diff(final_weights("single"), engine::load_safetensors(init_.string())), 1e-3);
}

TEST_F(OnnxRegimes, SplitAndFederatedTrainIt) {
  testing::run_roles_as_threads("split", context("split2", "split", {{"clients", 2}, {"cut", "pool_MaxPool"}}));
  testing::run_roles_as_threads("federated",
                                context("fed2", "federated", {{"clients", 2}, {"rounds", 1}, {"local_epochs", 1}}));
  expect_trained({"split2", "fed2"});
}

// Without BatchNorm every regime that splits the batch computes single's update.
TEST_F(OnnxTransformerRegimes, AccumulateDataParallelAndPipelineEqualSingle) {
  find_regime("single").run_role(context("single", "single", json::object()));
  find_regime("accumulate").run_role(context("accumulate", "accumulate", {{"micro_batches", 2}}));
  testing::run_roles_as_threads("data_parallel", context("dp2", "data_parallel", {{"ranks", 2}, {"backend", "shm"}}));
  // Cut between the two blocks: the residual stream alone crosses.
  testing::run_roles_as_threads("pipeline",
                                context("pp2", "pipeline", {{"cuts", {"blocks_blocks_0_Add_1"}}, {"micro_batches", 2}}));
  const json diffs = {{"accumulate", max_abs_diff(final_weights("single"), final_weights("accumulate"))},
                      {"dp2", max_abs_diff(final_weights("single"), final_weights("dp2"))},
                      {"pp2", max_abs_diff(final_weights("single"), final_weights("pp2"))}};
  std::cout << "[ measured ] tiny_vit.onnx vs single: " << diffs.dump() << "\n";
  for (const auto& [arm, d] : diffs.items()) EXPECT_LT(d.get<double>(), 2e-6) << arm;
  EXPECT_GT(max_abs_diff(final_weights("single"), engine::load_safetensors(init_.string())), 1e-4);
}

TEST_F(OnnxTransformerRegimes, SplitAndFederatedTrainIt) {
  testing::run_roles_as_threads("split",
                                context("split2", "split", {{"clients", 2}, {"cut", "blocks_blocks_0_Add_1"}}));
  testing::run_roles_as_threads("federated",
                                context("fed2", "federated", {{"clients", 2}, {"rounds", 1}, {"local_epochs", 1}}));
  expect_trained({"split2", "fed2"});
}

}  // namespace
}  // namespace quartet::trainers

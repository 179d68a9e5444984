// gpt-moe under the regimes that train the global model, as threads of one process:
// gpt-moe-dropless (what a token meets does not depend on the other tokens of its batch)
// equals single under accumulate, data_parallel, pipeline and expert_parallel. gpt-moe
// (capacity 1.25 and the balance loss, both taken over each forward pass's tokens)
// trains under each, and alike under the four, which split the batch into the same two
// halves: the balance loss's gradient weighs what each half's loss weighs in all four.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
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

class GptMoeRegimes : public testing::RegimeTest {
 protected:
  GptMoeRegimes() : RegimeTest("gpt_moe_regimes") {}
  static void SetUpTestSuite() { ::setenv("QUARTET_GLOO_TIMEOUT_S", "120", 0); }

  void use_model(const std::string& model) {
    const std::filesystem::path corpus = dir_ / "corpus";
    test_util::write_word_corpus(corpus, {"hamlet"}, 80, 3,
                               {"to", "be", "or", "not", "that", "is", "the", "question", "whether", "tis", "nobler"});
    workloads::WorkloadConfig wc;
    wc.name = "text-lm";
    wc.model = model;
    wc.data_dir = corpus.string();
    wc.test_limit = 4;
    use_workload(wc);
  }

  RoleContext context(const std::string& arm, const std::string& regime, json fields) {
    RoleContext c = RegimeTest::context(arm, 4, 2);
    c.config.eval_batch = 4;
    c.settings = testing::regime_settings(regime, c, std::move(fields));
    return c;
  }

  // Runs every arm; returns each arm's largest difference from single's final weights.
  std::vector<std::pair<std::string, double>> run_every_regime() {
    find_regime("single").run_role(context("single", "single", json::object()));
    find_regime("accumulate").run_role(context("accumulate", "accumulate", {{"micro_batches", 2}}));
    testing::run_roles_as_threads("data_parallel", context("dp2", "data_parallel", {{"ranks", 2}, {"backend", "shm"}}));
    testing::run_roles_as_threads("pipeline",
                                  context("pp2", "pipeline", {{"cuts", {"block1"}}, {"micro_batches", 2}}));
    testing::run_roles_as_threads("expert_parallel", context("ep2", "expert_parallel", {{"ranks", 2}}));
    std::vector<std::pair<std::string, double>> out;
    for (const char* arm : {"accumulate", "dp2", "pp2", "ep2"})
      out.emplace_back(arm, max_abs_diff(final_weights("single"), final_weights(arm)));
    return out;
  }
};

constexpr double kSameUpdate = 2e-6;

TEST_F(GptMoeRegimes, DroplessEqualsSingleUnderEveryRegimeThatSplitsTheBatch) {
  use_model("gpt-moe-dropless");
  for (const auto& [arm, diff] : run_every_regime()) {
    std::cout << "[ measured ] gpt-moe-dropless " << arm << " vs single: max |param diff| = " << diff << "\n";
    EXPECT_LT(diff, kSameUpdate) << arm;
  }
  EXPECT_GT(max_abs_diff(final_weights("single"), engine::load_safetensors(init_.string())), 1e-3);
}

TEST_F(GptMoeRegimes, GptMoeTrainsUnderEachRegimeAndAlikeWhereTheHalvesAreAlike) {
  use_model("gpt-moe");
  for (const auto& [arm, diff] : run_every_regime()) {
    std::cout << "[ measured ] gpt-moe " << arm << " vs single: max |param diff| = " << diff << "\n";
    EXPECT_TRUE(std::isfinite(diff)) << arm;
    EXPECT_GT(max_abs_diff(final_weights(arm), engine::load_safetensors(init_.string())), 1e-3) << arm;
  }
  for (const char* arm : {"dp2", "pp2", "ep2"})
    EXPECT_LT(max_abs_diff(final_weights("accumulate"), final_weights(arm)), kSameUpdate) << arm;
  for (const json& r : records("single", "trainer"))
    if (r.value("type", "") == "step") {
      EXPECT_TRUE(std::isfinite(r["loss"].get<double>()));
    }
}

TEST_F(GptMoeRegimes, TensorParallelRefusesItNamingTheModelsItSplits) {
  use_model("gpt-moe");
  try {
    context("tp2", "tensor_parallel", {{"ranks", 2}});
    FAIL() << "tensor_parallel took gpt-moe";
  } catch (const SettingsError& e) {
    EXPECT_NE(std::string(e.what()).find("model gpt-moe has no tensor-parallel split; models that have one: gpt-mini"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace quartet::trainers

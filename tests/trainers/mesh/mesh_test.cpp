// The mesh regime with ranks as threads of one process, over a real coordinator on
// 127.0.0.1 and shared memory or Gloo, as the processes of `quartet run` do it: gpt-mini
// on a small byte corpus, against single, and the rules it refuses.

#include "trainers/mesh/mesh.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "engine/safetensors.h"
#include "tests/trainers/trainer_test_util.h"
#include "workloads/models.h"

namespace quartet::trainers {
namespace {

using nlohmann::json;
using testing::max_abs_diff;

class Mesh : public testing::RanksOnTextTest {
 protected:
  Mesh() : RanksOnTextTest("mesh", "gpt-mini", 7) {}
  static void SetUpTestSuite() { ::setenv("QUARTET_GLOO_TIMEOUT_S", "120", 0); }

  RoleContext mesh_context(const std::string& arm, const json& mesh, json settings = json::object()) {
    RoleContext c = context(arm, 0);
    settings["mesh"] = mesh;
    c.settings = testing::regime_settings("mesh", c, settings);
    return c;
  }
  double diff_from_single(const std::string& arm, const json& mesh, json settings = json::object()) {
    testing::run_roles_as_threads("mesh", mesh_context(arm, mesh, std::move(settings)));
    const double diff = max_abs_diff(final_weights("single"), final_weights(arm));
    std::cout << "[ measured ] mesh " << mesh.dump() << " vs single: max |param diff| = " << diff << "\n";
    return diff;
  }
  // The step records of `role` in `arm`.
  std::vector<json> steps(const std::string& arm, const std::string& role) const {
    std::vector<json> out;
    for (const json& r : records(arm, role))
      if (r.value("type", "") == "step") out.push_back(r);
    return out;
  }
  // The SettingsError the mesh's settings raise, "" when they are accepted.
  std::string refusal(const json& settings, const std::string& model = "gpt-mini") {
    if (model != "gpt-mini") use_corpus(0, model);
    try {
      RoleContext c = context("refused", 0);
      c.settings = testing::regime_settings("mesh", c, settings);
    } catch (const SettingsError& e) {
      return e.what();
    }
    return "";
  }
};

// data_parallel's and tensor_parallel's tolerance: partial sums added in another order
// than one process's, over 3 SGD steps with momentum.
constexpr double kSameUpdate = 2e-6;

TEST_F(Mesh, DpTimesTpEqualsSingle) {
  run_single();
  EXPECT_LT(diff_from_single("dp2-tp2", {{"dp", 2}, {"tp", 2}}), kSameUpdate);
  EXPECT_LT(diff_from_single("dp4", {{"dp", 4}}), kSameUpdate);
  EXPECT_LT(diff_from_single("tp2", {{"tp", 2}}), kSameUpdate);
  EXPECT_GT(max_abs_diff(final_weights("single"), engine::load_safetensors(init_.string())), 1e-3);
}

// Per rank and step (docs/mesh.md): tp, 16 ring all-reduces (4 blocks x attention and MLP
// x forward and backward) of the (B/dp, 128, 128) activations, 2(tp-1)/tp of S each;
// dp, the ring all-reduce of the rank's slice of the gradients, 2(dp-1)/dp of 4 bytes a
// parameter, 2(dp-1) messages a bucket.
TEST_F(Mesh, EachAxisCountsItsOwnBytesByTheFormula) {
  run_single();
  EXPECT_LT(diff_from_single("dp2-tp2", {{"dp", 2}, {"tp", 2}}, {{"backend", "gloo"}}), kSameUpdate);
  const engine::NamedTensors init = engine::load_safetensors(init_.string());
  for (int tp_rank : {0, 1}) {
    int64_t slice = 0;
    for (const auto& [name, split] : workloads::tensor_parallel_plan("gpt-mini")) {
      int64_t numel = 0;
      for (const auto& [n, t] : init)
        if (n == name) numel = t.numel();
      if (split == workloads::TensorSplit::whole) slice += numel;
      if (split == workloads::TensorSplit::rows || split == workloads::TensorSplit::columns) slice += numel / 2;
      if (split == workloads::TensorSplit::first_rank && tp_rank == 0) slice += numel;
    }
    for (int dp_rank : {0, 1}) {
      const std::string role = "rank" + std::to_string(2 * dp_rank + tp_rank);
      const std::vector<json> mine = steps("dp2-tp2", role);
      for (const json& r : mine) {
        const json& axes = r["comm"]["axes"];
        EXPECT_EQ(axes["tp"]["bytes"], 16 * 2 * 128 * 128 * 4) << role;
        EXPECT_EQ(axes["tp"]["messages"], 16 * 2) << role;
        EXPECT_EQ(axes["dp"]["bytes"], slice * 4) << role;
        EXPECT_EQ(axes["dp"]["messages"], 2 * axes["dp"]["buckets"].get<int64_t>()) << role;
        EXPECT_EQ(r["comm"]["bytes"], axes["tp"]["bytes"].get<int64_t>() + axes["dp"]["bytes"].get<int64_t>());
        EXPECT_EQ(r["comm"]["coordinates"]["tp"], tp_rank) << role;
        EXPECT_EQ(r["comm"]["coordinates"]["dp"], dp_rank) << role;
      }
      EXPECT_EQ(mine.size(), 3u) << role;
    }
  }
}

// ZeRO over each dp line: the optimizer steps the rank's shard, the shards gathered back.
TEST_F(Mesh, ZeroOverDpEqualsSingle) {
  run_single();
  for (int zero : {1, 2})
    EXPECT_LT(diff_from_single("zero" + std::to_string(zero), {{"dp", 2}, {"tp", 2}, {"pp", 2}}, {{"zero", zero}}),
              kSameUpdate)
        << "zero " << zero;
}

TEST_F(Mesh, ResumeFromCheckpointsGivesTheSameFinalWeights) {
  expect_resume_bit_for_bit({{"mesh", {{"dp", 2}, {"tp", 2}}}});
}

// Under ZeRO each rank checkpoints its shard's optimizer state beside the parameters.
TEST_F(Mesh, ZeroResumesFromCheckpointsBitForBit) { expect_resume_bit_for_bit({{"mesh", {{"dp", 2}}}, {"zero", 2}}); }

// Each stage checkpoints its own stages' slices and optimizer state.
TEST_F(Mesh, PipelineResumesFromCheckpointsBitForBit) { expect_resume_bit_for_bit({{"mesh", {{"pp", 2}}}}); }

TEST_F(Mesh, RefusesEachAxisThatBreaksItsRule) {
  EXPECT_NE(refusal({{"mesh", {{"dp", 2}, {"tp", 2}}}, {"ranks", 8}}).find("ranks must equal dp x tp x pp x cp x ep"),
            std::string::npos);
  EXPECT_NE(refusal({{"mesh", {{"tp", 3}}}}).find("mesh.tp: 3 does not divide gpt-mini's 4 heads"), std::string::npos);
  EXPECT_NE(refusal({{"mesh", {{"cp", 3}}}}).find("mesh.cp: gpt-mini's context of 128 does not split into 2 x 3"),
            std::string::npos);
  EXPECT_NE(refusal({{"mesh", {{"pp", 50}}}}).find("mesh.pp: 50 pipeline stages, but gpt-mini has"), std::string::npos);
  EXPECT_NE(refusal({{"mesh", {{"dp", 3}}}}).find("mesh.dp: the batch 4 does not split evenly over 3"),
            std::string::npos);
  EXPECT_NE(refusal({{"mesh", {{"ep", 2}}}}).find("mesh.ep: ep spreads a mixture of experts"), std::string::npos);
  EXPECT_NE(refusal({{"mesh", {{"ep", 3}}}}, "gpt-moe").find("mesh.ep: 3 does not divide gpt-moe's"),
            std::string::npos);
}

// cp beside tp or pp, and ep, pass their rules and are refused as what this build does not train yet.
TEST_F(Mesh, RefusesTheAxesItDoesNotTrainYet) {
  EXPECT_NE(refusal({{"mesh", {{"cp", 2}, {"tp", 2}}}}).find("mesh.cp: this build's mesh runs cp beside dp only"),
            std::string::npos);
  EXPECT_EQ(refusal({{"mesh", {{"dp", 2}, {"tp", 2}, {"pp", 2}}}, {"ranks", 8}}), "");
  EXPECT_NE(refusal({{"mesh", {{"dp", 2}, {"tp", 2}}}, {"sequence_parallel", true}, {"zero", 2}}).find("zero: zero 2"),
            std::string::npos);
  EXPECT_NE(refusal({{"mesh", {{"ep", 2}, {"pp", 2}}}}, "gpt-moe").find("mesh.ep: this build's mesh runs ep beside dp"),
            std::string::npos);
  EXPECT_NE(refusal({{"mesh", {{"dp", 2}}}}, "gpt-moe").find("model: this build's mesh trains the models"),
            std::string::npos);
}

// Ring attention over each cp line; the gradients averaged over the dp-cp plane.
TEST_F(Mesh, ContextParallelMeshEqualsSingle) {
  run_single();
  EXPECT_LT(diff_from_single("dp2-cp2", {{"dp", 2}, {"cp", 2}}), kSameUpdate);
}

// Per rank and step (docs/mesh.md): cp, the ring's (3 cp - 2) blocks of 2 (B/dp) (T/cp) W
// floats per block (keys and values forward, again with their gradients backward); dp,
// the whole model's gradients all-reduced over the dp x cp ranks.
TEST_F(Mesh, ContextParallelAxisCountsTheRingsBlocks) {
  run_single();
  EXPECT_LT(diff_from_single("dp2-cp2", {{"dp", 2}, {"cp", 2}}, {{"backend", "gloo"}}), kSameUpdate);
  int64_t params = 0;
  for (const auto& [name, t] : engine::load_safetensors(init_.string())) params += t.numel();
  for (int r = 0; r < 4; ++r)
    for (const json& rec : steps("dp2-cp2", "rank" + std::to_string(r))) {      const json& axes = rec["comm"]["axes"];
      EXPECT_EQ(axes["cp"]["bytes"], 4 * (3 * 2 - 2) * 2 * 2 * 64 * 128 * 4) << r;
      EXPECT_EQ(axes["dp"]["bytes"], 2 * 3 * params * 4 / 4) << r;
      EXPECT_EQ(axes["tp"]["bytes"], 0);
    }
}

// gpt-moe-dropless's experts over each ep line (a capacity that drops nothing), their
// copies and the shared parameters averaged over the dp x ep plane.
TEST_F(Mesh, ExpertParallelMeshEqualsSingle) {
  use_corpus(0, "gpt-moe-dropless");
  run_single();
  EXPECT_LT(diff_from_single("dp2-ep2", {{"dp", 2}, {"ep", 2}}), kSameUpdate);
  for (int r = 0; r < 4; ++r)
    for (const json& rec : steps("dp2-ep2", "rank" + std::to_string(r))) {      EXPECT_GT(rec["comm"]["axes"]["ep"]["bytes"].get<int64_t>(), 0) << r;
      EXPECT_EQ(rec["comm"]["axes"]["ep"]["bytes"], rec["comm"]["all_to_all_bytes"]) << r;
      EXPECT_EQ(rec["moe"]["dropped"], 0) << r;
    }
}

// Pipeline stages hand activations and gradients on; with dp and tp beside them.
TEST_F(Mesh, PipelineMeshesEqualSingle) {
  run_single();
  EXPECT_LT(diff_from_single("dp2-pp2", {{"dp", 2}, {"pp", 2}}), kSameUpdate);
  EXPECT_LT(diff_from_single("tp2-pp2", {{"tp", 2}, {"pp", 2}}, {{"micro_batches", 2}}), kSameUpdate);
  EXPECT_LT(diff_from_single("pp3", {{"pp", 3}}), kSameUpdate);
}

// Sequence parallelism on the tp axis: beside dp, and across pipeline stages (each tp
// rank hands its slice of the sequence to the same tp rank of the next stage).
TEST_F(Mesh, SequenceParallelMeshesEqualSingle) {
  run_single();
  EXPECT_LT(diff_from_single("dp2-sp2", {{"dp", 2}, {"tp", 2}}, {{"sequence_parallel", true}}), kSameUpdate);
  EXPECT_LT(diff_from_single("sp2-pp2", {{"tp", 2}, {"pp", 2}}, {{"sequence_parallel", true}, {"micro_batches", 2}}),
            kSameUpdate);
  EXPECT_LT(diff_from_single("dp2-sp2-pp2-zero1", {{"dp", 2}, {"tp", 2}, {"pp", 2}},
                             {{"sequence_parallel", true}, {"zero", 1}}),
            kSameUpdate);
}

// Eight processes: (dp, tp, pp) = (2, 2, 2).
TEST_F(Mesh, DpTpPpTwoEachEqualsSingle) {
  run_single();
  EXPECT_LT(diff_from_single("dp2-tp2-pp2", {{"dp", 2}, {"tp", 2}, {"pp", 2}}), kSameUpdate);
}

// Per stage and step (docs/mesh.md): a stage before the last sends, per micro-batch, a
// shape header of 25 floats and the (B/(dp m), 128, 128) activations; a stage after the
// first sends their gradients back; every stage takes part in one 4-byte sum of the loss
// per micro-batch (2(pp-1)/pp of 4 bytes, 2(pp-1) messages).
TEST_F(Mesh, PipelineHandOversCountedByTheFormula) {
  run_single();
  EXPECT_LT(diff_from_single("dp2-pp2", {{"dp", 2}, {"pp", 2}}, {{"backend", "gloo"}, {"micro_batches", 2}}),
            kSameUpdate);
  const int64_t activation = 1 * 128 * 128 * 4;  // batch 4 over dp 2 and 2 micro-batches
  for (int stage : {0, 1})
    for (int dp_rank : {0, 1}) {
      const std::string role = "rank" + std::to_string(2 * stage + dp_rank);
      const std::vector<json> mine = steps("dp2-pp2", role);
      for (const json& r : mine) {
        const json& pp = r["comm"]["axes"]["pp"];
        const int64_t hand_overs = stage == 0 ? 2 * (25 * 4 + activation) : 2 * activation;
        EXPECT_EQ(pp["bytes"], hand_overs + 2 * 4) << role;
        EXPECT_EQ(pp["messages"], (stage == 0 ? 2 * 2 : 2) + 2 * 2) << role;
        EXPECT_EQ(r["comm"]["axes"]["tp"]["bytes"], 0) << role;
        EXPECT_EQ(r["comm"]["coordinates"]["pp"], stage) << role;
      }
      EXPECT_EQ(mine.size(), 3u) << role;
    }
}

}  // namespace
}  // namespace quartet::trainers

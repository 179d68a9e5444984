// Lab which-parallelism, reduced: its gpt-mini and gpt-moe arms on a small word corpus for
// two steps. The meshes end with single's weights, and each axis sends per rank and step
// what docs/mesh.md's formulas say.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cli/cli_util.h"
#include "tests/labs/labs_util.h"
#include "tests/text_corpus.h"

namespace {

namespace fs = std::filesystem;
using cli_util::records_of;
using cli_util::safetensors_floats;
using labs_util::Labs;
using labs_util::largest_difference;
using nlohmann::json;

// The rank's step-2 record.
json last_step(const fs::path& run, const std::string& arm, const std::string& role) {
  const std::vector<json> steps = records_of(run / arm / "roles" / (role + ".jsonl"), "step");
  EXPECT_EQ(steps.size(), 2u) << arm << " " << role;
  return steps.empty() ? json::object() : steps.back();
}

TEST_F(Labs, WhichParallelismMeshesEqualSingleAndSendTheirAxesFormulas) {
  quartet::test_util::write_word_corpus(dir_ / "corpus", 3);
  json spec = labs_util::lab_spec("which-parallelism", [](const json& arm) {
    const std::string name = arm["name"];
    return name == "single" || name == "dp-4" || name == "mesh-dp2-tp2-pp2" || name == "moe-single" ||
           name == "moe-mesh-dp2-ep2";
  });
  ASSERT_EQ(spec["arms"].size(), 5u);
  spec["workload"]["data_dir"] = (dir_ / "corpus").string();
  spec["workload"]["train_samples"] = 32;
  spec["workload"]["test_samples"] = 4;
  spec["train"]["max_steps"] = 2;
  spec["train"]["eval_batch"] = 4;
  // gpt-moe-dropless: no token dropped, so the mesh's update is single's.
  for (json& arm : spec["arms"])
    if (arm.value("model", "") == "gpt-moe") arm["model"] = "gpt-moe-dropless";
  const fs::path out = run(spec);

  // Adam's tolerance (tests/trainers/trainer_test_util.h: kAdamSameUpdate).
  for (const auto& [arm, base] : {std::pair{"mesh-dp2-tp2-pp2", "single"}, {"moe-mesh-dp2-ep2", "moe-single"}}) {
    const std::vector<float> a = safetensors_floats(out / arm / "final.safetensors");
    const std::vector<float> b = safetensors_floats(out / base / "final.safetensors");
    ASSERT_EQ(a.size(), b.size()) << arm;
    EXPECT_LT(largest_difference(a, b), 1e-4) << arm;
  }

  // Batch 16, T 128, W 128. dp 2 x tp 2 x pp 2, stage 0 (embed, block0, block1): tp, 8
  // all-reduces of the (8, 128, 128) activations, 2(tp-1)/tp of S each; pp, a 25-float
  // header and those activations, then one 4-byte sum of the loss over 2 stages.
  const int64_t act = 8 * 128 * 128 * 4;
  const json axes = last_step(out, "mesh-dp2-tp2-pp2", "rank0")["comm"]["axes"];
  EXPECT_EQ(axes["tp"]["bytes"], 8 * act);
  EXPECT_EQ(axes["pp"]["bytes"], 100 + act + 4);
  EXPECT_EQ(last_step(out, "mesh-dp2-tp2-pp2", "rank4")["comm"]["axes"]["pp"]["bytes"], act + 4);
  // data_parallel over 4 ranks: 2(N-1)/N of gpt-mini's 875,520 gradients a step.
  const std::vector<json> dp = records_of(out / "dp-4" / "roles" / "rank0.jsonl", "step");
  ASSERT_EQ(dp.size(), 2u);
  EXPECT_EQ(dp[1]["bytes_sent"].get<int64_t>() - dp[0]["bytes_sent"].get<int64_t>(), 875520 * 4 * 3 / 2);
  // The expert mesh: ep all-to-alls and dp sums, both moving bytes.
  const json moe = last_step(out, "moe-mesh-dp2-ep2", "rank0")["comm"]["axes"];
  EXPECT_GT(moe["ep"]["bytes"].get<int64_t>(), 0);
  EXPECT_GT(moe["dp"]["bytes"].get<int64_t>(), 0);
}

}  // namespace

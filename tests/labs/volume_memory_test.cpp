// Lab volume-memory (docs/labs/volume-memory.md), reduced: unet3d on two CT phantoms of
// 32^3 voxels, patches of 16^3 and 32^3, plain and checkpointed, two steps each.

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"
#include "tests/labs/labs_util.h"

namespace {

namespace fs = std::filesystem;
using cli_util::safetensors_floats;
using labs_util::largest_difference;
using nlohmann::json;

class VolumeMemoryLab : public labs_util::Labs {};

// The lab's experiment file at 32^3 volumes, its 16^3 and 32^3 arms, two steps.
json reduced_volume_memory() {
  json spec = labs_util::lab_spec("volume-memory", [](const json& arm) { return arm["patch"].get<int>() <= 32; });
  spec["workload"]["volume_size"] = 32;
  spec["train"]["epochs"] = 2;
  return spec;
}

// Activations grow with the patch's voxels; checkpointing holds fewer of them and ends
// with the plain arm's weights (the same patches, the same arithmetic, recomputed).
TEST_F(VolumeMemoryLab, CheckpointingCutsTheActivationPeakAndKeepsTheWeights) {
  const json spec = reduced_volume_memory();
  ASSERT_EQ(spec["arms"].size(), 4u);
  const fs::path out = run(spec);
  auto activations = [&](const std::string& arm) {
    return summary(out, arm)["memory_peak_bytes"]["by_tag"]["activations"].get<double>();
  };
  for (const char* patch : {"16", "32"}) {
    const std::string plain = std::string("plain-") + patch, ckpt = std::string("ckpt-") + patch;
    EXPECT_EQ(summary(out, plain)["steps"], 2) << plain;
    EXPECT_EQ(summary(out, ckpt)["steps"], 2) << ckpt;
    EXPECT_GT(activations(plain), 0.0) << plain;
    EXPECT_LT(activations(ckpt), 0.8 * activations(plain)) << patch;
    const std::vector<float> a = safetensors_floats(out / plain / "final.safetensors");
    const std::vector<float> b = safetensors_floats(out / ckpt / "final.safetensors");
    ASSERT_EQ(a.size(), b.size()) << patch;
    EXPECT_LT(largest_difference(a, b), 1e-6) << patch;
  }
  // 8 times the voxels: well over 4 times the activations.
  EXPECT_GT(activations("plain-32"), 4 * activations("plain-16"));
  EXPECT_GT(activations("ckpt-32"), 4 * activations("ckpt-16"));
}

}  // namespace

// Lab syncbn (docs/labs/syncbn.md) in reduced form: the lab's three arms on synthetic
// data for 4 steps of a global batch of 8 over 4 ranks, 2 samples each. Few steps,
// because at batch 8 the rounding differences between single and sync_bn grow by orders
// of magnitude within tens of steps (the page shows it); the lab's claim is about the
// computation, which the first steps show.

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

class SyncBnLab : public labs_util::Labs {};

// With sync_bn every rank normalises with the statistics of the whole batch of 8, as
// single does: the weights, running statistics included, agree to float rounding. With
// each rank's own 2 samples they differ after the first step already.
TEST_F(SyncBnLab, SyncBatchNormEndsWithSinglesWeightsLocalBatchNormDoesNot) {
  json spec = reduced("syncbn", 64, 16);
  spec["repeats"] = 1;
  spec["train"]["max_steps"] = 4;
  ASSERT_EQ(spec["arms"].size(), 3u);
  const fs::path out = run(spec);
  const std::vector<float> single = safetensors_floats(out / "single" / "final.safetensors");
  ASSERT_GT(single.size(), 77000u);  // resnet-mini: 77,754 parameters and the running statistics
  for (const char* arm : {"ddp-4-local", "ddp-4-sync"}) {
    EXPECT_EQ(summary(out, arm)["status"], "finished") << arm;
    EXPECT_EQ(summary(out, arm)["steps"], 4) << arm;
  }
  const std::vector<float> sync = safetensors_floats(out / "ddp-4-sync" / "final.safetensors");
  const std::vector<float> local = safetensors_floats(out / "ddp-4-local" / "final.safetensors");
  ASSERT_EQ(sync.size(), single.size());
  ASSERT_EQ(local.size(), single.size());
  EXPECT_LT(largest_difference(sync, single), 1e-5);
  EXPECT_GT(largest_difference(local, single), 1e-3);
}

}  // namespace

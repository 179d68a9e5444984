// Lab linear-scaling (docs/labs/linear-scaling.md) in reduced form: the lab's two scaled
// arms, batch 512 at lr 0.24 from the first step or warmed up to it, on 8,192 synthetic
// samples for the first 16 steps, three seeds. The claim is about those early steps.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"
#include "tests/labs/labs_util.h"

namespace {

namespace fs = std::filesystem;
using cli_util::records_of;
using nlohmann::json;

class LinearScalingLab : public labs_util::Labs {};

std::vector<double> step_losses(const fs::path& repeat_dir, const std::string& arm) {
  std::vector<double> losses;
  for (const json& step : records_of(repeat_dir / arm / "roles" / "trainer.jsonl", "step"))
    losses.push_back(step["loss"].get<double>());
  return losses;
}

// The full scaled rate from the first step overshoots: within 16 steps the training loss
// climbs well above where it started. Warmed up to the same rate, it never rises above
// its start and ends the 16 steps far below it.
TEST_F(LinearScalingLab, ScaledRateWithoutWarmupOvershootsEarlyWarmedUpDoesNot) {
  json spec = reduced("linear-scaling", 8192, 64, [](const json& arm) {
    return arm["name"] == "big-512-scaled" || arm["name"] == "big-512-warmup";
  });
  spec["train"]["max_steps"] = 16;
  ASSERT_EQ(spec["arms"].size(), 2u);
  ASSERT_EQ(spec["repeats"], 3);
  const fs::path out = run(spec);
  for (const fs::path& repeat : {out, out / "repeats" / "2", out / "repeats" / "3"}) {
    const std::vector<double> cold = step_losses(repeat, "big-512-scaled");
    const std::vector<double> warm = step_losses(repeat, "big-512-warmup");
    ASSERT_EQ(cold.size(), 16u) << repeat;
    ASSERT_EQ(warm.size(), 16u) << repeat;
    EXPECT_NEAR(cold.front(), warm.front(), 1e-6) << repeat;  // the same initial weights and batch
    EXPECT_GT(*std::max_element(cold.begin(), cold.end()), cold.front() + 0.4) << repeat;
    EXPECT_LE(*std::max_element(warm.begin(), warm.end()), warm.front() + 0.01) << repeat;
    EXPECT_LT(warm.back(), 0.5 * warm.front()) << repeat;
  }
}

}  // namespace

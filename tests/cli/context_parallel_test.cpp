// context_parallel end to end through the `quartet` binary: rank processes rendezvous
// through the run's coordinator and pass key/value blocks over shared memory; each
// process's activations (the engine's memory figures are per process) and ring bytes
// against their formulas (docs/context_parallel.md), and the weights against single's;
// tensor_parallel's sequence parallelism's activations too (docs/tensor_parallel.md).
// Real processes, so labelled multirank and run serially.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"
#include "tests/text_corpus.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using cli_util::file_bytes;
using cli_util::quartet;
using cli_util::records_of;
using cli_util::Result;

class ContextParallelCli : public cli_util::FolderTest {
 protected:
  ContextParallelCli() : FolderTest("cli_context_parallel") {}

  // Two sources of fortunes, lines of words from a fixed list: about a hundred windows.
  void SetUp() override {
    FolderTest::SetUp();
    quartet::test_util::write_word_corpus(dir_ / "corpus", 5);
  }
};

// gpt-mini: L = 4 blocks of width W = 128 with H = 4 heads, V = 256 byte values, T = 128.
constexpr int64_t kL = 4, kW = 128, kH = 4, kV = 256, kT = 128;

// The floats a training step keeps per token at the end of forward, what backward reads:
// per block the first layer norm's output and its 2 statistics, q, k and v, the attention's
// output and its H log-sum-exps, the residual after attention, the second layer norm's
// output and statistics, the MLP's 4W hidden units before and after GELU and the residual
// after the MLP; then the embeddings' sum, the final layer norm's output and statistics,
// the V logits and their V softmax probabilities, the input byte and its position.
constexpr int64_t kFloatsPerToken = kL * (16 * kW + kH + 4) + 2 * kW + 2 * kV + 4;

// The activations' peak of one process: `tokens` of them, the loss, and under
// context_parallel the whole batch of B x T bytes each rank reads before it takes its
// positions.
int64_t activation_bytes(int64_t tokens, int64_t whole_batch_bytes) {
  return 4 * (tokens * kFloatsPerToken + 1) + whole_batch_bytes;
}

TEST_F(ContextParallelCli, RanksHoldOneNthOfTheActivationsAndSendTheRingsBlocks) {
  const int64_t batch = 8;
  const json spec = {
      {"name", "cp"},
      {"workload",
       {{"name", "text-lm"}, {"model", "gpt-mini"}, {"data_dir", (dir_ / "corpus").string()}, {"test_samples", 4}}},
      {"seed", 3},
      {"threads", 1},
      {"train",
       {{"epochs", 1}, {"batch", batch}, {"max_steps", 2}, {"eval_batch", 4}, {"optimizer", {{"lr", 0.05}, {"momentum", 0.9}}}}},
      {"arms", json::array({{{"name", "single"}, {"regime", "single"}},
                            {{"name", "cp-2"}, {"regime", "context_parallel"}, {"ranks", 2}},
                            {{"name", "cp-4"}, {"regime", "context_parallel"}, {"ranks", 4}},
                            {{"name", "tp-2-sp"}, {"regime", "tensor_parallel"}, {"ranks", 2},
                             {"sequence_parallel", true}}})}};
  std::ofstream(dir_ / "spec.json") << spec.dump(2);
  const Result r = quartet({"run", (dir_ / "spec.json").string(), "--out", (dir_ / "r").string(), "--progress=none"},
                           dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto last_step = [&](const std::string& arm, const std::string& role) {
    const std::vector<json> steps = records_of(dir_ / "r" / arm / "roles" / (role + ".jsonl"), "step");
    EXPECT_EQ(steps.size(), 2u) << arm << "/" << role;
    return steps.empty() ? json::object() : steps.back();
  };
  const int64_t single = last_step("single", "trainer")["memory"]["activations"]["peak"];
  EXPECT_EQ(single, activation_bytes(batch * kT, 0));
  for (int64_t n : {2, 4}) {
    const std::string arm = "cp-" + std::to_string(n);
    for (int64_t rank = 0; rank < n; ++rank) {
      const json step = last_step(arm, "rank" + std::to_string(rank));
      const int64_t mine = step["memory"]["activations"]["peak"];
      EXPECT_EQ(mine, activation_bytes(batch * kT / n, 4 * batch * kT)) << arm << " rank " << rank;
      // Per block, (3N - 2) blocks of keys and values, 2 B (T/N) W floats each.
      EXPECT_EQ(step["comm"]["ring_bytes"], kL * (3 * n - 2) * 2 * batch * (kT / n) * kW * 4) << arm;
    }
    const double worst =
        cli_util::max_abs_diff(dir_ / "r" / "single" / "final.safetensors", dir_ / "r" / arm / "final.safetensors");
    EXPECT_GE(worst, 0.0) << arm << ": the weights differ in count";
    EXPECT_LT(worst, 2e-6) << arm;
  }
  // Sequence-parallel tensor parallelism (docs/tensor_parallel.md): every activation 1/N,
  // the column-parallel layers' gathered inputs gathered again in backward, not kept.
  const int64_t n = 2;
  const int64_t sp_floats = batch * kT / n * (kL * (16 * kW + kH + 4) + 2 * kW + 2 * kV + 4);
  for (const char* role : {"rank0", "rank1"})
    EXPECT_EQ(last_step("tp-2-sp", role)["memory"]["activations"]["peak"], activation_bytes(0, 0) + 4 * sp_floats +
                                                                                   4 * batch * kT)
        << role;
}

}  // namespace

#include "analysis/plan/memory.h"

#include <gtest/gtest.h>

namespace quartet::analysis::plan {
namespace {

// Rajbhandari et al. (2020), Figure 1: a 7.5B-parameter model on 64 data-parallel GPUs,
// mixed precision Adam (K = 12): 120 GB of model state per device at stage 0, 31.4 GB
// with the optimizer state sharded, 16.6 GB with the gradients too, 1.9 GB with all.
TEST(Memory, ZeroFigureOneFor7point5BOn64Gpus) {
  const StateBytes b = state_bytes("fp16", "adam");
  EXPECT_DOUBLE_EQ(b.optimizer, 12.0);
  const double psi = 7.5e9;
  EXPECT_NEAR(model_state(psi, 0, 64, b).total() / 1e9, 120.0, 0.05);
  EXPECT_NEAR(model_state(psi, 1, 64, b).total() / 1e9, 31.4, 0.05);
  EXPECT_NEAR(model_state(psi, 2, 64, b).total() / 1e9, 16.6, 0.05);
  EXPECT_NEAR(model_state(psi, 3, 64, b).total() / 1e9, 1.9, 0.05);
}

TEST(Memory, Fp32AdamIsSixteenBytesAParameterAndSgdTwelve) {
  EXPECT_DOUBLE_EQ(model_state(1000, 0, 1, state_bytes("fp32", "adam")).total(), 16000);
  EXPECT_DOUBLE_EQ(model_state(1000, 0, 1, state_bytes("fp32", "sgd")).total(), 12000);
}

TEST(Memory, ZeroShardsTheStatesInOrder) {
  const StateBytes b = state_bytes("fp32", "adam");
  const MemoryBytes one = model_state(1000, 1, 4, b), two = model_state(1000, 2, 4, b), three = model_state(1000, 3, 4, b);
  EXPECT_DOUBLE_EQ(one.optimizer_state, 2000);
  EXPECT_DOUBLE_EQ(one.gradients, 4000);
  EXPECT_DOUBLE_EQ(two.gradients, 1000);
  EXPECT_DOUBLE_EQ(two.parameters, 4000);
  EXPECT_DOUBLE_EQ(three.parameters, 1000);
}

// Korthikanti et al. (2022): a transformer layer keeps s b h (34 + 5 a s / h) bytes at
// 16 bits without parallelism, 2 s b h of them the two dropout masks gpt-mini's layout
// lacks: 32 + 5 a s / h here. Tensor with sequence parallelism divides all of it by t.
TEST(Memory, TransformerLayerActivationsAreKorthikantis) {
  GptDims d{1, 16, 1024, 512, 256, false, false, std::nullopt};
  const ModelShape m = gpt_shape("g", d);
  size_t first = 0, last = 0;  // block0's layers
  for (size_t i = 0; i < m.layers.size(); ++i) {
    if (m.layers[i].stage == "block0" && first == 0) first = i;
    if (m.layers[i].stage == "block0") last = i + 1;
  }
  const double s = 512, h = 1024, a = 16;
  const double paper = s * h * (32 + 5 * a * s / h);
  const double ours = activations(m, first, last, 1, 1, 1, false, false, "bf16").kept;
  EXPECT_NEAR(ours / paper, 1.0, 1e-9);
  const double tp4 = activations(m, first, last, 1, 4, 1, true, false, "bf16").kept;
  EXPECT_NEAR(tp4 / (paper / 4), 1.0, 1e-9);
}

TEST(Memory, CheckpointingKeepsStageInputs) {
  const ModelShape m = model_shape("gpt-mini");
  const ActivationBytes full = activations(m, 0, m.layers.size(), 8, 1, 1, false, false, "fp32");
  const ActivationBytes ckpt = activations(m, 0, m.layers.size(), 8, 1, 1, false, true, "fp32");
  EXPECT_LT(ckpt.kept + ckpt.recompute, full.kept / 2);
  // The inputs of the five stages after embed, 8 × 128 × 128 floats each (embed's input
  // is the batch itself, held by the data loader).
  EXPECT_DOUBLE_EQ(ckpt.kept, 5 * 8 * 128 * 128 * 4.0);
}

TEST(Memory, OneFOneBHoldsFewerMicroBatchesThanGpipe) {
  EXPECT_EQ(micro_batches_in_flight("gpipe", 0, 4, 8), 8);
  EXPECT_EQ(micro_batches_in_flight("1f1b", 0, 4, 8), 4);
  EXPECT_EQ(micro_batches_in_flight("1f1b", 3, 4, 8), 1);
  EXPECT_EQ(micro_batches_in_flight("1f1b", 0, 4, 2), 2);
  // Interleaved, 4 stages × 2 chunks: the first rank warms up 2·3 + 1·4 chunks and holds
  // one more, 11 chunks of half a stage; the last 1·4 + 1 = 5 of them.
  EXPECT_DOUBLE_EQ(micro_batches_in_flight("1f1b", 0, 4, 8, 2), 5.5);
  EXPECT_DOUBLE_EQ(micro_batches_in_flight("1f1b", 3, 4, 8, 2), 2.5);
  EXPECT_DOUBLE_EQ(micro_batches_in_flight("1f1b", 0, 4, 2, 2), 2.0);  // no more than m's chunks
}

TEST(MemoryHostile, UnknownNamesAreRefused) {
  EXPECT_THROW(state_bytes("fp8", "adam"), std::invalid_argument);
  EXPECT_THROW(state_bytes("fp32", "lion"), std::invalid_argument);
  EXPECT_THROW(model_state(1, 4, 1, {}), std::invalid_argument);
  EXPECT_THROW(micro_batches_in_flight("zb", 0, 2, 2), std::invalid_argument);
}

}  // namespace
}  // namespace quartet::analysis::plan

// Activation checkpointing (engine::Model::set_checkpointing) on the zoo's models: the
// same gradients as without it, less activation memory at the peak.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/memory.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "workloads/models.h"

namespace quartet::workloads {
namespace {

struct Case {
  std::string model;
  engine::Shape input;  // with the batch
  // Whether checkpointing can lower the peak: mlp's peak is one layer's output and its
  // ReLU's, inside the first stage, which the recompute needs all the same.
  bool peak_falls = true;
};

// gtest prints the parameter into the test's name: the model and its input, not its bytes.
void PrintTo(const Case& c, std::ostream* out) {
  *out << c.model << " on ";
  for (size_t i = 0; i < c.input.size(); ++i) *out << (i ? "x" : "") << c.input[i];
}

engine::Tensor input_for(const Case& c) {
  engine::Tensor x = engine::Tensor::empty(c.input);
  engine::Generator gen(21);
  engine::normal_(x, 0.0f, 1.0f, gen);
  return x;
}

// Segmentation: Dice + cross-entropy over the voxels, as the volume workloads train;
// classification: cross-entropy.
engine::Tensor loss_of(const engine::Tensor& logits) {
  std::vector<int32_t> labels;
  const int64_t classes = logits.size(1);
  const int64_t n = logits.dim() == 2 ? logits.size(0) : logits.numel() / classes;
  for (int64_t i = 0; i < n; ++i) labels.push_back(static_cast<int32_t>((i * 7 + i / 5) % classes));
  if (logits.dim() == 2) return engine::cross_entropy(logits, labels);
  return engine::add(engine::soft_dice_loss(logits, labels, false, 1e-5f, true),
                     engine::cross_entropy(logits, labels, {}));
}

struct Pass {
  std::vector<engine::Tensor> grads;
  engine::NamedTensors buffers;
  int64_t activation_peak = 0;  // bytes above what lived before forward
  float loss = 0.0f;
};

Pass train_pass(const Case& c, bool checkpointing) {
  auto model = make_model(c.model, 5);
  model->set_checkpointing(checkpointing);
  const engine::Tensor x = input_for(c);
  constexpr int kActivations = static_cast<int>(engine::MemTag::activations);
  engine::reset_memory_peaks();
  const int64_t base = engine::memory_stats().current[kActivations];
  engine::Tensor loss = loss_of(model->forward(x));
  loss.backward();
  Pass p;
  p.activation_peak = engine::memory_stats().peak[kActivations] - base;
  p.loss = loss.item();
  for (const engine::Tensor& t : model->parameters()) p.grads.push_back(t.grad());
  p.buffers = model->named_buffers();
  return p;
}

class CheckpointedModel : public ::testing::TestWithParam<Case> {};

TEST_P(CheckpointedModel, GradientsEqualTheUncheckpointedOnes) {
  const Pass plain = train_pass(GetParam(), false), ckpt = train_pass(GetParam(), true);
  EXPECT_EQ(plain.loss, ckpt.loss);
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  // The recompute runs the same kernels on the same values, so the gradients agree to
  // float rounding: within 1e-5 of the largest gradient entry of each parameter.
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    ASSERT_TRUE(ckpt.grads[i].defined()) << "parameter " << i;
    const std::vector<float> a = plain.grads[i].to_vector(), b = ckpt.grads[i].to_vector();
    float scale = 0.0f, worst = 0.0f;
    for (size_t k = 0; k < a.size(); ++k) {
      scale = std::max(scale, std::fabs(a[k]));
      worst = std::max(worst, std::fabs(a[k] - b[k]));
    }
    EXPECT_LE(worst, 1e-5f * std::max(scale, 1e-3f)) << GetParam().model << " parameter " << i;
  }
  // BatchNorm's running statistics moved once, as without checkpointing.
  ASSERT_EQ(plain.buffers.size(), ckpt.buffers.size());
  for (size_t i = 0; i < plain.buffers.size(); ++i)
    EXPECT_EQ(plain.buffers[i].second.to_vector(), ckpt.buffers[i].second.to_vector()) << plain.buffers[i].first;
}

TEST_P(CheckpointedModel, TheActivationPeakFallsWhereStagesHoldIt) {
  const Pass plain = train_pass(GetParam(), false), ckpt = train_pass(GetParam(), true);
  if (GetParam().peak_falls) {
    // resnet-mini (batch 8): 4.0 -> 2.3 MiB; unet3d (2 x 16^3): 9.5 -> 5.3 MiB.
    EXPECT_LT(ckpt.activation_peak * 10, plain.activation_peak * 7) << GetParam().model;
  } else {
    // The same peak, but for the loss's few scalars alive during the recompute.
    EXPECT_LE(ckpt.activation_peak, plain.activation_peak + 64) << GetParam().model;
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, CheckpointedModel,
                         ::testing::Values(Case{"mlp", {64, 1, 28, 28}, false}, Case{"resnet-mini", {8, 1, 28, 28}},
                                           Case{"unet3d", {2, 1, 16, 16, 16}}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = info.param.model;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace quartet::workloads

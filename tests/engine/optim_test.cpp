#include <gtest/gtest.h>

#include <cmath>

#include "engine/optim.h"

namespace quartet::engine {
namespace {

Tensor param_with_grad(std::vector<float> value, std::vector<float> grad) {
  Shape s{static_cast<int64_t>(value.size())};
  Tensor p = Tensor::from_vector(s, value);
  p.set_requires_grad(true);
  p.set_grad(Tensor::from_vector(s, grad));
  return p;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "element " << i;
}

TEST(Sgd, PlainStepIsLrTimesGradient) {
  Tensor p = param_with_grad({1, 2}, {0.5, -1});
  SGD opt({p}, {.lr = 0.1f});
  opt.step();
  expect_near(p.to_vector(), {0.95f, 2.1f});
}

TEST(Sgd, MomentumAndWeightDecayFollowPyTorchsFormula) {
  // Step 1: d = g + wd p = 1 + 0.1*1 = 1.1; buf = 1.1; p = 1 - 0.1*1.1 = 0.89.
  // Step 2 (same g): d = 1 + 0.1*0.89 = 1.089; buf = 0.9*1.1 + 1.089 = 2.079;
  // p = 0.89 - 0.1*2.079 = 0.6821.
  Tensor p = param_with_grad({1}, {1});
  SGD opt({p}, {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.1f});
  opt.step();
  expect_near(p.to_vector(), {0.89f});
  opt.step();
  expect_near(p.to_vector(), {0.6821f});
}

TEST(Sgd, NesterovUsesGradientPlusMomentumTimesBuffer) {
  // Step 1: buf = 1; d = 1 + 0.9*1 = 1.9; p = 0 - 0.1*1.9 = -0.19.
  // Step 2: buf = 0.9 + 1 = 1.9; d = 1 + 0.9*1.9 = 2.71; p = -0.19 - 0.271 = -0.461.
  Tensor p = param_with_grad({0}, {1});
  SGD opt({p}, {.lr = 0.1f, .momentum = 0.9f, .nesterov = true});
  opt.step();
  expect_near(p.to_vector(), {-0.19f});
  opt.step();
  expect_near(p.to_vector(), {-0.461f});
}

TEST(Sgd, ParametersWithoutGradientAreLeftAlone) {
  Tensor p = Tensor::from_vector({1}, {3});
  p.set_requires_grad(true);
  SGD opt({p}, {.lr = 0.1f, .momentum = 0.9f});
  opt.step();
  EXPECT_EQ(p.item(), 3.0f);
}

TEST(Sgd, MomentumIsChargedToOptimizerState) {
  Tensor p = param_with_grad({1, 2, 3, 4}, {1, 1, 1, 1});
  const int64_t before = memory_stats().current[static_cast<int>(MemTag::optimizer_state)];
  SGD opt({p}, {.lr = 0.1f, .momentum = 0.9f});
  opt.step();
  EXPECT_EQ(memory_stats().current[static_cast<int>(MemTag::optimizer_state)] - before, 16);
}

TEST(Sgd, StateRoundTripsThroughLoadState) {
  Tensor p = param_with_grad({1, 2}, {1, -1});
  SGD a({p}, {.lr = 0.1f, .momentum = 0.9f});
  a.step();
  Tensor q = param_with_grad({1, 2}, {1, -1});
  SGD b({q}, {.lr = 0.1f, .momentum = 0.9f});
  b.load_state(a.state());
  ASSERT_EQ(b.state().size(), 1u);
  EXPECT_EQ(b.state()[0].second.to_vector(), a.state()[0].second.to_vector());
  EXPECT_THROW(b.load_state({{"7.momentum", Tensor::zeros({2})}}), std::invalid_argument);
  EXPECT_THROW(b.load_state({{"0.momentum", Tensor::zeros({3})}}), std::invalid_argument);
}

TEST(Sgd, InvalidOptionsAreRefused) {
  EXPECT_THROW(SGD({}, {.lr = -1.0f}), std::invalid_argument);
  EXPECT_THROW(SGD({}, {.lr = 0.1f, .nesterov = true}), std::invalid_argument);
}

TEST(ClipGradNorm, ScalesToMaxNormAndReturnsTheOriginalNorm) {
  // Global norm of (3, 4) and (12) is 13; clipping to 6.5 halves every gradient.
  Tensor a = param_with_grad({0, 0}, {3, 4});
  Tensor b = param_with_grad({0}, {12});
  const double norm = clip_grad_norm({a, b}, 6.5);
  EXPECT_NEAR(norm, 13.0, 1e-6);
  const double coef = 6.5 / (13.0 + 1e-6);
  expect_near(a.grad().to_vector(), {static_cast<float>(3 * coef), static_cast<float>(4 * coef)});
  expect_near(b.grad().to_vector(), {static_cast<float>(12 * coef)});
}

TEST(ClipGradNorm, LeavesSmallGradientsUnchanged) {
  Tensor a = param_with_grad({0, 0}, {3, 4});
  EXPECT_NEAR(clip_grad_norm({a}, 10.0), 5.0, 1e-6);
  expect_near(a.grad().to_vector(), {3, 4});
}

}  // namespace
}  // namespace quartet::engine

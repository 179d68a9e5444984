#include <gtest/gtest.h>

#include <cmath>
#include <string>

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

// ---- Adam / AdamW ----

// PyTorch's Adam/AdamW update written out in double, one call per step.
struct AdamReference {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  std::vector<double> p, m, v;
  int t = 0;

  void step(const std::vector<float>& grad) {
    ++t;
    const double bias1 = 1.0 - std::pow(beta1, t), bias2 = 1.0 - std::pow(beta2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      if (decoupled) p[i] *= 1.0 - lr * weight_decay;
      const double g = grad[i] + (decoupled ? 0.0 : weight_decay * p[i]);
      m[i] = beta1 * m[i] + (1.0 - beta1) * g;
      v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
      p[i] -= lr / bias1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bias2) + eps);
    }
  }
};

const std::vector<std::vector<float>> kAdamGrads{{0.5f, -1.0f, 0.0f}, {-0.25f, -0.5f, 0.1f}, {1.5f, 0.3f, -0.2f}};

TEST(Adam, FirstStepMovesEachParameterByLrAgainstItsGradient) {
  // Step 1: m-hat = g and v-hat = g^2, so the update is lr * g / (|g| + eps).
  Tensor p = param_with_grad({1, 2}, {0.5, -4});
  Adam opt({p}, {.lr = 0.1f});
  opt.step();
  expect_near(p.to_vector(), {0.9f, 2.1f});
}

TEST(Adam, ThreeStepsWithL2WeightDecayMatchTheReferenceFormula) {
  const AdamOptions o{.lr = 0.05f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-6f, .weight_decay = 0.1f};
  Tensor p = param_with_grad({1.0f, -2.0f, 0.5f}, kAdamGrads[0]);
  Adam opt({p}, o);
  AdamReference ref{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, false, {1.0, -2.0, 0.5}, {0, 0, 0}, {0, 0, 0}};
  for (const auto& g : kAdamGrads) {
    p.set_grad(Tensor::from_vector({3}, g));
    opt.step();
    ref.step(g);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_NEAR(p.to_vector()[i], ref.p[i], 1e-6) << "step " << ref.t << " element " << i;
  }
}

TEST(AdamW, ThreeStepsWithDecoupledWeightDecayMatchTheReferenceFormula) {
  const AdamWOptions o{.lr = 0.05f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-6f, .weight_decay = 0.1f};
  Tensor p = param_with_grad({1.0f, -2.0f, 0.5f}, kAdamGrads[0]);
  AdamW opt({p}, o);
  AdamReference ref{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, true, {1.0, -2.0, 0.5}, {0, 0, 0}, {0, 0, 0}};
  for (const auto& g : kAdamGrads) {
    p.set_grad(Tensor::from_vector({3}, g));
    opt.step();
    ref.step(g);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_NEAR(p.to_vector()[i], ref.p[i], 1e-6) << "step " << ref.t << " element " << i;
  }
}

TEST(AdamW, ZeroGradientOnlyDecaysTheWeights) {
  // p *= 1 - lr * wd = 0.95; m = v = 0 leave the Adam part at 0. Adam's L2 instead feeds
  // wd * p into the moments and moves p by about lr.
  Tensor p = param_with_grad({2, -4}, {0, 0});
  AdamW opt({p}, {.lr = 0.1f, .weight_decay = 0.5f});
  opt.step();
  expect_near(p.to_vector(), {1.9f, -3.8f});
  Tensor q = param_with_grad({2, -4}, {0, 0});
  Adam l2({q}, {.lr = 0.1f, .weight_decay = 0.5f});
  l2.step();
  expect_near(q.to_vector(), {1.9f, -3.9f});
}

TEST(Adam, StepCountsArePerParameterAsInPyTorch) {
  Tensor a = param_with_grad({1}, {1});
  Tensor b = Tensor::from_vector({1}, {1});
  b.set_requires_grad(true);
  Adam opt({a, b}, {.lr = 0.1f});
  opt.step();
  b.set_grad(Tensor::from_vector({1}, {1}));
  opt.step();
  for (const auto& [name, t] : opt.state()) {
    if (name == "0.step") {
      EXPECT_EQ(t.item(), 2.0f);
    }
    if (name == "1.step") {
      EXPECT_EQ(t.item(), 1.0f);
    }
  }
  EXPECT_EQ(opt.state().size(), 6u);
  // b's first step has bias correction 1 again: it moves by lr, as a fresh Adam would.
  EXPECT_NEAR(b.item(), 0.9f, 1e-6);
}

TEST(Adam, StateNamesPyTorchsSlotsPerParameter) {
  Tensor p = param_with_grad({1, 2}, {1, -1});
  Adam opt({p}, {});
  EXPECT_TRUE(opt.state().empty());
  opt.step();
  const NamedTensors st = opt.state();
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st[0].first, "0.exp_avg");
  EXPECT_EQ(st[1].first, "0.exp_avg_sq");
  EXPECT_EQ(st[2].first, "0.step");
  EXPECT_EQ(st[2].second.item(), 1.0f);
}

TEST(Adam, StateRoundTripContinuesIdentically) {
  Tensor p = param_with_grad({1, 2}, {1, -1});
  AdamW a({p}, {.lr = 0.1f, .weight_decay = 0.1f});
  a.step();
  p.set_grad(Tensor::from_vector({2}, {0.3f, 2}));
  a.step();
  Tensor q = param_with_grad(p.to_vector(), {0.5f, -0.5f});
  AdamW b({q}, {.lr = 0.1f, .weight_decay = 0.1f});
  b.load_state(a.state());
  p.set_grad(Tensor::from_vector({2}, {0.5f, -0.5f}));
  a.step();
  b.step();
  EXPECT_EQ(q.to_vector(), p.to_vector());
  EXPECT_EQ(b.state()[2].second.item(), 3.0f);
}

TEST(Adam, LoadStateRefusesIncompleteOrMisshapenState) {
  Tensor p = param_with_grad({1, 2}, {1, -1});
  Adam a({p}, {});
  a.step();
  NamedTensors st = a.state();
  EXPECT_THROW(a.load_state({st[0], st[1]}), std::invalid_argument);  // no step
  EXPECT_THROW(a.load_state({st[0], st[1], {"0.step", Tensor::from_vector({1}, {0})}}), std::invalid_argument);
  EXPECT_THROW(a.load_state({st[0], st[1], {"0.step", Tensor::from_vector({1}, {1.5f})}}), std::invalid_argument);
  EXPECT_THROW(a.load_state({st[0], {"0.exp_avg_sq", Tensor::zeros({3})}, st[2]}), std::invalid_argument);
  EXPECT_THROW(a.load_state({{"1.exp_avg", Tensor::zeros({2})}}), std::invalid_argument);
  EXPECT_THROW(a.load_state({{"0.momentum", Tensor::zeros({2})}}), std::invalid_argument);
  EXPECT_NO_THROW(a.load_state(st));
}

TEST(Adam, MomentsAreChargedToOptimizerState) {
  Tensor p = param_with_grad({1, 2, 3, 4}, {1, 1, 1, 1});
  const int64_t before = memory_stats().current[static_cast<int>(MemTag::optimizer_state)];
  Adam opt({p}, {});
  opt.step();
  EXPECT_EQ(memory_stats().current[static_cast<int>(MemTag::optimizer_state)] - before, 32);
}

TEST(Adam, InvalidOptionsAreRefusedNamingThem) {
  auto message = [](auto make) -> std::string {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message([] { Adam({}, {.beta1 = 1.0f}); }).find("beta1"), std::string::npos);
  EXPECT_NE(message([] { Adam({}, {.beta2 = -0.1f}); }).find("beta2"), std::string::npos);
  EXPECT_NE(message([] { AdamW({}, {.eps = -1.0f}); }).find("eps"), std::string::npos);
  EXPECT_NE(message([] { AdamW({}, {.weight_decay = -1.0f}); }).find("adamw: weight_decay"), std::string::npos);
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

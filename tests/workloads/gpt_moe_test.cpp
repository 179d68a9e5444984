// gpt-moe: the parameters of the PyTorch definition in docs/models.md, the routing counts
// against the capacity formula, finite-difference gradients through the router and the
// experts, and the settings it refuses.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "tests/engine/gradcheck.h"
#include "workloads/gpt.h"
#include "workloads/models.h"

namespace quartet::workloads {
namespace {

using engine::Tensor;

GptConfig tiny() { return {.layers = 2, .heads = 2, .width = 8, .context = 8, .vocab = 16}; }

Tensor bytes(int64_t n, int64_t t, int64_t vocab) {
  std::vector<float> v;
  for (int64_t i = 0; i < n * t; ++i) v.push_back(static_cast<float>((i * 11 + i / 3) % vocab));
  return Tensor::from_vector({n, t}, v);
}

TEST(GptMoe, ParametersMatchThePyTorchDefinition) {
  const auto model = make_model("gpt-moe", 1);
  std::vector<std::string> moe;
  for (const auto& [name, t] : model->named_parameters())
    if (name.find(".moe.") != std::string::npos || name.find(".mlp.") != std::string::npos) moe.push_back(name);
  std::vector<std::string> expected;
  for (int b = 0; b < 4; ++b) {
    const std::string p = "block" + std::to_string(b);
    if (b % 2 == 0) {
      for (const char* n : {".mlp.up.weight", ".mlp.up.bias", ".mlp.down.weight", ".mlp.down.bias"})
        expected.push_back(p + n);
      continue;
    }
    expected.push_back(p + ".moe.router.weight");
    for (int e = 0; e < 4; ++e)
      for (const char* n : {".up.weight", ".up.bias", ".down.weight", ".down.bias"})
        expected.push_back(p + ".moe.experts." + std::to_string(e) + n);
  }
  EXPECT_EQ(moe, expected);
  // gpt-mini's 875,520 with two MLPs (131,712) become 4 experts and a router of 4 x 128.
  EXPECT_EQ(model_info("gpt-moe").parameters, 875520 + 2 * (3 * 131712 + 512));
  EXPECT_EQ(model_info("gpt-moe").task, kLanguageModel);
  EXPECT_EQ(model->stage_names(), make_model("gpt-mini", 1)->stage_names());
}

TEST(GptMoe, ChoicesBeyondTheCapacityAreDroppedAndCounted) {
  for (int64_t k : {1, 2})
    for (double factor : {0.0, 0.5, 1.0, 2.0}) {
      MoeConfig m{.experts = 4, .top_k = k, .capacity_factor = factor, .every = 1, .aux_loss = 0.0, .z_loss = 0.0};
      engine::Generator gen(3);
      auto stats = std::make_shared<MoeStats>();
      auto model = make_gpt_moe(tiny(), m, gen, {}, stats);
      engine::NoGradScope no_grad;
      const Tensor y = model->forward(bytes(3, 8, 16));  // 24 tokens a layer
      EXPECT_EQ(y.shape(), (engine::Shape{24, 16}));
      const int64_t tokens = 24, capacity =
          factor > 0 ? static_cast<int64_t>(std::ceil(factor * static_cast<double>(tokens * k) / 4.0)) : tokens;
      EXPECT_EQ(stats->choices, 2 * tokens * k);
      int64_t taken = 0;
      for (int64_t load : stats->load) {
        EXPECT_LE(load, 2 * capacity);  // two layers
        taken += load;
      }
      EXPECT_EQ(taken + stats->dropped, stats->choices) << "k " << k << " factor " << factor;
      if (factor == 0.0 || factor >= 4.0 / static_cast<double>(k)) {
        EXPECT_EQ(stats->dropped, 0);
      }
      if (factor == 0.5) {
        EXPECT_GE(stats->dropped, 2 * (tokens * k - 4 * capacity));
      }
    }
}

TEST(GptMoe, DroppedTokensPassThroughOnTheResidualStream) {
  // A capacity of 1 token an expert: most tokens skip the experts, and their output is
  // what a block without the MLP gives: nothing but a finite result is promised here.
  MoeConfig m{.experts = 2, .top_k = 1, .capacity_factor = 0.01, .every = 1, .aux_loss = 0.0, .z_loss = 0.0};
  engine::Generator gen(5);
  auto stats = std::make_shared<MoeStats>();
  auto model = make_gpt_moe(tiny(), m, gen, {}, stats);
  const Tensor y = model->forward(bytes(2, 8, 16));
  EXPECT_EQ(stats->dropped, 2 * (16 - 2));
  for (float v : y.to_vector()) ASSERT_TRUE(std::isfinite(v));
  engine::sum(y).backward();  // idle and busy experts alike get a gradient
  for (const auto& [name, p] : model->named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
}

TEST(GptMoe, GradientThroughRouterAndExpertsMatchesFiniteDifferences) {
  for (int64_t k : {1, 2}) {
    MoeConfig m{.experts = 3, .top_k = k, .capacity_factor = 1.0, .every = 1, .aux_loss = 0.0, .z_loss = 0.0};
    engine::Generator gen(9);
    auto layer = make_moe_mlp(tiny(), m, gen, {}, nullptr);
    EXPECT_TRUE(engine::testing::gradcheck([&](const engine::TensorList& in) { return layer->forward(in[0]); },
                                           {engine::testing::param({2, 3, 8}, 4)}, {.eps = 1e-3f, .atol = 3e-3f}))
        << "k " << k;
  }
}

TEST(GptMoe, TheBalanceLossPullsTheRouterTowardsEvenLoad) {
  // Only the balance loss differs: the router's gradient changes by it, the experts' not.
  auto grads = [](double alpha) {
    MoeConfig m{.experts = 4, .top_k = 2, .capacity_factor = 0.0, .every = 1, .aux_loss = alpha, .z_loss = 0.0};
    engine::Generator gen(2);
    auto layer = make_moe_mlp(tiny(), m, gen, {}, nullptr);
    engine::sum(layer->forward(engine::testing::random_tensor({2, 4, 8}, 6))).backward();
    std::vector<std::vector<float>> g;
    for (const auto& [name, p] : layer->named_parameters()) g.push_back(p.grad().to_vector());
    return g;
  };
  const auto off = grads(0.0), on = grads(0.5);
  EXPECT_NE(off[0], on[0]);  // router.weight
  for (size_t i = 1; i < off.size(); ++i) EXPECT_EQ(off[i], on[i]);
}

// The router z-loss, beta * mean over the tokens of lse(x W_r^T)^2, adds its gradient to
// the router's and to nothing else.
TEST(GptMoe, TheZLossAddsItsGradientToTheRoutersOnly) {
  const double beta = 0.25;
  const Tensor input = engine::testing::random_tensor({2, 4, 8}, 6);
  auto grads = [&](double z) {
    MoeConfig m{.experts = 4, .top_k = 2, .capacity_factor = 0.0, .every = 1, .aux_loss = 0.0, .z_loss = z};
    engine::Generator gen(2);
    auto layer = make_moe_mlp(tiny(), m, gen, {}, nullptr);
    engine::sum(layer->forward(input)).backward();
    std::vector<Tensor> g;
    for (const auto& [name, p] : layer->named_parameters()) g.push_back(p.grad());
    return std::make_pair(g, layer->named_parameters().front().second);
  };
  const auto [off, router_weight] = grads(0.0);
  const auto on = grads(beta).first;
  Tensor w = router_weight.detach().clone();
  w.set_requires_grad(true);
  const Tensor lse = engine::logsumexp(engine::linear(engine::reshape(input, {8, 8}), w, Tensor()));
  engine::scale(engine::mean(engine::mul(lse, lse)), static_cast<float>(beta)).backward();
  const std::vector<float> a = on[0].to_vector(), b = off[0].to_vector(), z = w.grad().to_vector();
  ASSERT_EQ(a.size(), z.size());
  double worst = 0.0, largest = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i] - z[i]));
    largest = std::max(largest, std::abs(static_cast<double>(z[i])));
  }
  EXPECT_GT(largest, 1e-3) << "the z-loss moved the router";
  EXPECT_LT(worst, 1e-6);
  for (size_t i = 1; i < off.size(); ++i) EXPECT_EQ(off[i].to_vector(), on[i].to_vector());
}

TEST(GptMoeHostile, SettingsThatMakeNoModelAreRefused) {
  const auto refuses = [](MoeConfig m, const std::string& part) {
    try {
      check_moe_config(m, 1);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what()).find(part) != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(refuses({.experts = 0}, "experts must be >= 1"));
  EXPECT_TRUE(refuses({.experts = 4, .top_k = 3}, "top_k must be 1 (Switch) or 2 (GShard)"));
  EXPECT_TRUE(refuses({.experts = 1, .top_k = 2}, "at most the experts (1)"));
  EXPECT_TRUE(refuses({.capacity_factor = -1.0}, "capacity_factor must be >= 0"));
  EXPECT_TRUE(refuses({.every = 0}, "every must be >= 1"));
  EXPECT_TRUE(refuses({.aux_loss = std::nan("")}, "aux_loss must be >= 0"));
  EXPECT_TRUE(refuses({.z_loss = -1.0}, "z_loss must be >= 0"));
}

}  // namespace
}  // namespace quartet::workloads

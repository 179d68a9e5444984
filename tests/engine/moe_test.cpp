// The mixture-of-experts ops (softmax, logsumexp, top_k_gates, gather_rows, combine_rows,
// add_side_loss): hand-computed values, finite-difference gradients, bad input messages.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::expect_near;
using testing::gradcheck;
using testing::param;
using testing::throws_invalid_argument;

TEST(Softmax, RowsSumToOneAndMatchTheFormula) {
  const Tensor x = Tensor::from_vector({2, 3}, {1.0f, 2.0f, 3.0f, -1.0f, 0.0f, 1000.0f});
  const std::vector<float> p = softmax(x).to_vector();
  const double s = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  expect_near(p, {static_cast<float>(std::exp(1.0) / s), static_cast<float>(std::exp(2.0) / s),
                  static_cast<float>(std::exp(3.0) / s), 0.0f, 0.0f, 1.0f},
              1e-7f);
}

TEST(Softmax, Gradient) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return softmax(in[0]); }, {param({4, 5}, 1, -2.0f, 2.0f)}));
}

TEST(Logsumexp, MatchesTheFormulaWithoutOverflow) {
  const Tensor x = Tensor::from_vector({2, 3}, {1.0f, 2.0f, 3.0f, -1.0f, 0.0f, 1000.0f});
  const Tensor lse = logsumexp(x);
  EXPECT_EQ(lse.shape(), (Shape{2}));
  expect_near(lse.to_vector(),
              {static_cast<float>(std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0))), 1000.0f}, 1e-6f);
  EXPECT_EQ(logsumexp(Tensor::from_vector({2}, {0.0f, 0.0f})).shape(), (Shape{1}));
}

TEST(Logsumexp, Gradient) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return logsumexp(in[0]); }, {param({4, 5}, 2, -2.0f, 2.0f)}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return logsumexp(in[0]); }, {param({2, 3, 4}, 3, -2.0f, 2.0f)}));
}

TEST(TopKGates, PicksTheLargestInFallingOrderLowerIndexOnATie) {
  const Tensor p = Tensor::from_vector({2, 4}, {0.1f, 0.4f, 0.2f, 0.3f, 0.25f, 0.25f, 0.25f, 0.25f});
  const TopKGates two = top_k_gates(p, 2, false);
  EXPECT_EQ(two.experts, (std::vector<int32_t>{1, 3, 0, 1}));
  expect_near(two.gates.to_vector(), {0.4f, 0.3f, 0.25f, 0.25f}, 0.0f);
  const TopKGates normalised = top_k_gates(p, 2, true);
  expect_near(normalised.gates.to_vector(), {0.4f / 0.7f, 0.3f / 0.7f, 0.5f, 0.5f}, 1e-7f);
  EXPECT_EQ(top_k_gates(p, 1, false).experts, (std::vector<int32_t>{1, 0}));
}

TEST(TopKGates, GradientWithAndWithoutNormalising) {
  // Distinct values far apart, so a nudge of eps never changes the choice.
  const std::vector<float> v{0.05f, 0.5f, 0.2f, 0.9f, 0.7f, 0.1f, 0.35f, 0.0f, 0.6f, 0.3f, 0.8f, 0.15f};
  for (bool normalize : {false, true})
    for (int64_t k : {1, 2, 3}) {
      Tensor p = testing::leaf({3, 4}, v);
      EXPECT_TRUE(gradcheck([&](const TensorList& in) { return top_k_gates(in[0], k, normalize).gates; }, {p},
                            {.eps = 1e-3f}))
          << "k " << k << " normalize " << normalize;
    }
}

TEST(GatherRows, PicksRowsAndSumsTheirGradients) {
  const Tensor x = Tensor::from_vector({3, 2}, {1, 2, 3, 4, 5, 6});
  expect_near(gather_rows(x, {2, 0, 2}).to_vector(), {5, 6, 1, 2, 5, 6}, 0.0f);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return gather_rows(in[0], {2, 0, 2, 1}); }, {param({3, 4}, 2)}));
}

TEST(CombineRows, WeightsEachTokensExpertRowsAndSkipsDroppedOnes) {
  const Tensor y = Tensor::from_vector({3, 2}, {1, 2, 10, 20, 100, 200});
  const Tensor g = Tensor::from_vector({2, 2}, {0.5f, 0.25f, 2.0f, 3.0f});
  // Token 0: 0.5 y[2] + 0.25 y[0]; token 1: 2 y[1], its second choice dropped.
  expect_near(combine_rows(y, g, {2, 0, 1, -1}).to_vector(), {50.25f, 100.5f, 20.0f, 40.0f}, 1e-5f);
}

TEST(CombineRows, GradientToRowsAndGates) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return combine_rows(in[0], in[1], {3, 0, -1, 2, 4, -1}); },
                        {param({5, 4}, 3), param({3, 2}, 4)}));
}

TEST(AddSideLoss, GivesTheLossTheWeightOfTheMainLoss) {
  Tensor x = param({2, 2}, 5);
  Tensor a = param({1}, 6);
  Tensor loss_weight = Tensor::full({1}, 3.0f);
  loss_weight.set_requires_grad(true);
  const Tensor y = add_side_loss(x, mul(a, loss_weight));
  expect_near(y.to_vector(), x.to_vector(), 0.0f);
  {
    SideLossWeightScope weight(0.25f);
    sum(y).backward();
  }
  expect_near(x.grad().to_vector(), {1, 1, 1, 1}, 0.0f);
  expect_near(a.grad().to_vector(), {0.75f}, 0.0f);  // d(3a)/da at weight 0.25
  EXPECT_EQ(side_loss_weight(), 1.0f);
}

TEST(MoeOpsHostile, RefuseWhatTheyCannotDo) {
  const Tensor p = Tensor::full({2, 3}, 1.0f / 3.0f);
  EXPECT_TRUE(throws_invalid_argument([&] { top_k_gates(p, 4, false); }, {"top_k_gates", "k must be in [1, 3]"}));
  EXPECT_TRUE(throws_invalid_argument([&] { top_k_gates(Tensor::full({3}, 1.0f), 1, false); }, {"(R, E)"}));
  const Tensor y = Tensor::full({2, 4}, 1.0f), g = Tensor::full({2, 1}, 1.0f);
  EXPECT_TRUE(throws_invalid_argument([&] { combine_rows(y, g, {0}); }, {"combine_rows", "R * K = 2"}));
  EXPECT_TRUE(throws_invalid_argument([&] { combine_rows(y, g, {1, 1}); }, {"slot 1 at position 1"}));
  EXPECT_TRUE(throws_invalid_argument([&] { combine_rows(y, g, {0, 2}); }, {"slot 2"}));
  EXPECT_TRUE(throws_invalid_argument([&] { gather_rows(y, {2}); }, {"index 2"}));
  EXPECT_TRUE(throws_invalid_argument([&] { add_side_loss(y, y); }, {"add_side_loss", "one element"}));
  EXPECT_TRUE(throws_invalid_argument([&] { logsumexp(Tensor::empty({2, 0})); }, {"logsumexp", "no zero size"}));
}

}  // namespace
}  // namespace quartet::engine

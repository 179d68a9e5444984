#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/autograd.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::expect_near;
using testing::gradcheck;
using testing::leaf;
using testing::param;
using testing::random_tensor;
using testing::throws_invalid_argument;

// Values with 0.1 <= |v| <= 1 and random signs: far from the kink at 0 compared with
// the finite-difference eps.
Tensor away_from_zero(const Shape& shape, uint64_t seed) {
  Tensor t = random_tensor(shape, seed, 0.1f, 1.0f);
  Generator gen(seed + 100);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (gen.below(2) == 0) t.data()[i] = -t.data()[i];
  t.set_requires_grad(true);
  return t;
}

// ---- leaky_relu ----

TEST(Erf, ForwardMatchesTheLibraryAndGradientsFiniteDifferences) {
  const std::vector<float> y = erf(Tensor::from_vector({4}, {-2.0f, -0.5f, 0.0f, 1.0f})).to_vector();
  expect_near(y, {-0.995322265f, -0.520499878f, 0.0f, 0.842700793f}, 1e-6f);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return erf(in[0]); }, {param({3, 5}, 40, -2.0f, 2.0f)}));
}

TEST(LeakyReLU, ForwardMatchesHandComputedValues) {
  Tensor y = leaky_relu(Tensor::from_vector({4}, {-2, -0.5f, 0, 3}), 0.1f);
  expect_near(y.to_vector(), {-0.2f, -0.05f, 0, 3}, 1e-7f);
}

// Past 2^16 elements the loops go to the threads in slices; every element is computed
// as on one thread.
TEST(LeakyReLU, OnThreadsEqualsOneThreadAndTheFormula) {
  auto run = [](int threads) {
    testing::ThreadsScope scope(threads);
    Tensor x = param({3, 7, 64, 73}, 5);
    Tensor y = leaky_relu(x, 0.1f);
    y.backward(random_tensor(y.shape(), 6));
    return std::pair{y.to_vector(), x.grad().to_vector()};
  };
  const auto one = run(1), two = run(2);
  EXPECT_EQ(one, two);
  const std::vector<float> x = param({3, 7, 64, 73}, 5).to_vector(), g = random_tensor({3, 7, 64, 73}, 6).to_vector();
  for (size_t i = 0; i < x.size(); i += 997) {
    EXPECT_EQ(two.first[i], x[i] > 0.0f ? x[i] : 0.1f * x[i]) << i;
    EXPECT_EQ(two.second[i], x[i] > 0.0f ? g[i] : 0.1f * g[i]) << i;
  }
}

TEST(LeakyReLU, DefaultSlopeIsOneHundredth) {
  EXPECT_FLOAT_EQ(leaky_relu(Tensor::from_vector({1}, {-3})).item(), -0.03f);
}

TEST(LeakyReLU, NegativeSlopeGradientFollowsTheInputSign) {
  // With slope -0.5 the output of x = -1 is positive; the gradient is still the slope.
  Tensor x = leaf({2}, {-1, 2});
  sum(leaky_relu(x, -0.5f)).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{-0.5f, 1}));
}

TEST(LeakyReLU, Gradients2dMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return leaky_relu(in[0], 0.2f); },
                        {away_from_zero({2, 3, 5, 3}, 1)}));
}

TEST(LeakyReLU, Gradients3dMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return leaky_relu(in[0], 0.2f); },
                        {away_from_zero({1, 2, 3, 3, 5}, 2)}));
}

TEST(LeakyReLU, RejectsNonFiniteSlope) {
  EXPECT_TRUE(throws_invalid_argument(
      [] { leaky_relu(Tensor::zeros({2, 3}), std::numeric_limits<float>::infinity()); },
      {"leaky_relu", "negative_slope", "[2, 3]"}));
}

// ---- sigmoid ----

TEST(Sigmoid, ForwardMatchesHandComputedValues) {
  // sigmoid(0) = 1/2, sigmoid(ln 3) = 3/4, sigmoid(-ln 3) = 1/4.
  const float ln3 = std::log(3.0f);
  Tensor y = sigmoid(Tensor::from_vector({3}, {0, ln3, -ln3}));
  expect_near(y.to_vector(), {0.5f, 0.75f, 0.25f}, 1e-6f);
}

TEST(Sigmoid, SaturatesWithoutOverflowForLargeInputs) {
  Tensor y = sigmoid(Tensor::from_vector({2}, {-200, 200}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0, 1}));
}

TEST(Sigmoid, GradientAtZeroIsOneQuarter) {
  Tensor x = leaf({1}, {0});
  sigmoid(x).backward();
  EXPECT_FLOAT_EQ(x.grad().item(), 0.25f);
}

TEST(Sigmoid, Gradients2dMatchFiniteDifferences) {
  EXPECT_TRUE(
      gradcheck([](const TensorList& in) { return sigmoid(in[0]); }, {param({2, 3, 5, 3}, 1, -3, 3)}));
}

TEST(Sigmoid, Gradients3dMatchFiniteDifferences) {
  EXPECT_TRUE(
      gradcheck([](const TensorList& in) { return sigmoid(in[0]); }, {param({1, 2, 3, 3, 5}, 2, -3, 3)}));
}

// ---- tanh ----

TEST(Tanh, ForwardMatchesHandComputedValues) {
  // tanh(ln(3) / 2) = (3 - 1) / (3 + 1).
  const float h = 0.5f * std::log(3.0f);
  Tensor y = tanh(Tensor::from_vector({3}, {0, h, -h}));
  expect_near(y.to_vector(), {0, 0.5f, -0.5f}, 1e-6f);
}

TEST(Tanh, Gradients2dMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return tanh(in[0]); }, {param({2, 3, 5, 3}, 1, -2, 2)}));
}

TEST(Tanh, Gradients3dMatchFiniteDifferences) {
  EXPECT_TRUE(
      gradcheck([](const TensorList& in) { return tanh(in[0]); }, {param({1, 2, 3, 3, 5}, 2, -2, 2)}));
}

// ---- dropout ----

TEST(Dropout, SameSeedDropsTheSameElements) {
  Tensor x = Tensor::full({4, 50}, 1.0f);
  Generator a(5), b(5);
  EXPECT_EQ(dropout(x, 0.5f, a).to_vector(), dropout(x, 0.5f, b).to_vector());
}

TEST(Dropout, DifferentSeedsDropDifferentElements) {
  Tensor x = Tensor::full({4, 50}, 1.0f);
  Generator a(5), b(6);
  EXPECT_NE(dropout(x, 0.5f, a).to_vector(), dropout(x, 0.5f, b).to_vector());
}

TEST(Dropout, KeptElementsAreScaledByOneOverKeepProbability) {
  Tensor x = random_tensor({100, 100}, 1, 0.5f, 1.0f);
  Generator gen(3);
  const std::vector<float> y = dropout(x, 0.3f, gen).to_vector(), v = x.to_vector();
  int dropped = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0.0f) {
      ++dropped;
    } else {
      EXPECT_FLOAT_EQ(y[i], v[i] / 0.7f) << "element " << i;
    }
  }
  EXPECT_NEAR(dropped / 10000.0, 0.3, 0.02);
}

TEST(Dropout, ProbabilityZeroIsTheIdentity) {
  Tensor x = random_tensor({3, 4}, 1);
  Generator gen(3);
  EXPECT_EQ(dropout(x, 0.0f, gen).to_vector(), x.to_vector());
}

TEST(Dropout, GradientIsTheScaledMask) {
  Tensor x = leaf({2, 30}, std::vector<float>(60, 1.0f));
  Generator gen(9);
  Tensor y = dropout(x, 0.5f, gen);
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector(), y.to_vector());  // x = 1: the output is the mask
}

TEST(Dropout, Gradients2dMatchFiniteDifferences) {
  // A fresh generator per call: every evaluation draws the same mask.
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        Generator gen(4);
        return dropout(in[0], 0.4f, gen);
      },
      {param({2, 3, 5, 3}, 1)}));
}

TEST(Dropout, Gradients3dMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        Generator gen(4);
        return dropout(in[0], 0.4f, gen);
      },
      {param({1, 2, 3, 3, 5}, 2)}));
}

TEST(Dropout, RejectsProbabilityOutOfRange) {
  Generator gen;
  for (auto [p, text] : {std::pair{1.0f, "got 1 "}, {-0.1f, "got -0.1 "},
                         {std::numeric_limits<float>::quiet_NaN(), "got nan "}})
    EXPECT_TRUE(throws_invalid_argument([&] { dropout(Tensor::zeros({2, 3}), p, gen); },
                                        {"dropout: p must be in [0, 1)", text, "(input [2, 3])"}));
}

// ---- modules ----

TEST(DropoutModule, SameSeedGivesTheSameMasks) {
  Dropout a(0.5f, 11), b(0.5f, 11);
  Tensor x = Tensor::full({4, 25}, 1.0f);
  EXPECT_EQ(a(x).to_vector(), b(x).to_vector());
  EXPECT_EQ(a(x).to_vector(), b(x).to_vector());  // and the streams stay in step
}

TEST(DropoutModule, IsTheIdentityInEvalMode) {
  Dropout d(0.5f, 11);
  d.eval();
  Tensor x = random_tensor({4, 25}, 1);
  EXPECT_EQ(d(x).to_vector(), x.to_vector());
}

TEST(DropoutModule, RejectsProbabilityOutOfRange) {
  EXPECT_TRUE(throws_invalid_argument([] { Dropout d(1.5f); }, {"Dropout: p must be in [0, 1), got 1.5"}));
}

TEST(ActivationModules, ApplyTheirOps) {
  Tensor x = Tensor::from_vector({1, 3}, {-1, 0, 2});
  EXPECT_EQ(LeakyReLU(0.5f)(x).to_vector(), leaky_relu(x, 0.5f).to_vector());
  EXPECT_EQ(Sigmoid()(x).to_vector(), sigmoid(x).to_vector());
  EXPECT_EQ(Tanh()(x).to_vector(), tanh(x).to_vector());
}

}  // namespace
}  // namespace quartet::engine

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/threads.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::gradcheck;
using testing::GradcheckOptions;
using testing::param;
using testing::random_tensor;

// Means over many positions make each logit's gradient small (~1e-3), below gradcheck's
// default atol; the losses are summed in double, so a tight tolerance holds.
constexpr GradcheckOptions kTight{.eps = 1e-2f, .atol = 2e-5f, .rtol = 1e-2f};

// One class per (n, *spatial) position of logits (N, C, *spatial), every class used.
std::vector<int32_t> spread_targets(const Tensor& logits) {
  const int64_t classes = logits.size(1);
  std::vector<int32_t> t(static_cast<size_t>(logits.numel() / classes));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 7 + i / 3) % classes);
  return t;
}

// Softmax over channels at position (n, s) of logits viewed as (N, C, S), in double.
std::vector<double> softmax_at(const Tensor& logits, int64_t n, int64_t s) {
  const int64_t C = logits.size(1), S = logits.numel() / (logits.size(0) * C);
  const float* x = logits.data() + n * C * S + s;
  double m = x[0];
  for (int64_t c = 1; c < C; ++c) m = std::max(m, static_cast<double>(x[c * S]));
  std::vector<double> p(static_cast<size_t>(C));
  double z = 0.0;
  for (int64_t c = 0; c < C; ++c) z += p[c] = std::exp(x[c * S] - m);
  for (double& v : p) v /= z;
  return p;
}

// The messages of std::invalid_argument thrown by fn, or "" when none is thrown.
template <class Fn>
std::string invalid_argument_message(Fn&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// ---- cross_entropy ----

TEST(Loss, CrossEntropyMatchesHandComputedValue) {
  // logits (1, 3) = [1, 2, 3], target 2: loss = log(e^1 + e^2 + e^3) - 3.
  Tensor logits = Tensor::from_vector({1, 3}, {1, 2, 3});
  const double expected = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0;
  EXPECT_NEAR(cross_entropy(logits, {2}).item(), expected, 1e-6);
}

TEST(Loss, CrossEntropyIsStableForLargeLogits) {
  Tensor logits = Tensor::from_vector({1, 2}, {1000, 0});
  EXPECT_NEAR(cross_entropy(logits, {0}).item(), 0.0, 1e-6);
  EXPECT_NEAR(cross_entropy(logits, {1}).item(), 1000.0, 1e-3);
}

TEST(Loss, CrossEntropyGradientMatchesFiniteDifferences) {
  std::vector<int32_t> targets{0, 4, 2, 2, 1};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return cross_entropy(in[0], targets); }, {param({5, 5}, 3)}));
}

TEST(Loss, CrossEntropyRejectsOutOfRangeTargetsAndCountMismatch) {
  EXPECT_THROW(cross_entropy(Tensor::zeros({2, 3}), {0, 3}), std::invalid_argument);
  EXPECT_THROW(cross_entropy(Tensor::zeros({2, 3}), {0, -1}), std::invalid_argument);
  EXPECT_THROW(cross_entropy(Tensor::zeros({2, 3}), {0}), std::invalid_argument);
  EXPECT_THROW(cross_entropy(Tensor::zeros({6}), {0}), std::invalid_argument);
}

TEST(Loss, CrossEntropyOverVoxelsIsTheMeanOverPositions) {
  // logits (N=1, C=2, W=2): channel 0 = [0, 2], channel 1 = [0, 0]; targets [1, 0].
  // Position 0: log(e^0 + e^0) - 0 = log 2. Position 1: log(e^2 + e^0) - 2 = log(1 + e^-2).
  Tensor logits = Tensor::from_vector({1, 2, 2}, {0, 2, 0, 0});
  const double expected = (std::log(2.0) + std::log1p(std::exp(-2.0))) / 2.0;
  EXPECT_NEAR(cross_entropy(logits, {1, 0}, {}).item(), expected, 1e-6);
}

TEST(Loss, CrossEntropyClassWeightsGiveTheWeightedMean) {
  // Rows [0, 0] -> 0, [1, 0] -> 1, [0, 1] -> 1; nll = log 2, log(1 + e), log(1 + e^-1).
  // Weights (1, 3): (1 log 2 + 3 log(1 + e) + 3 log(1 + e^-1)) / (1 + 3 + 3), PyTorch's
  // sum w[t] nll / sum w[t].
  Tensor logits = Tensor::from_vector({3, 2}, {0, 0, 1, 0, 0, 1});
  const double e = std::exp(1.0);
  const double nll0 = std::log(2.0), nll1 = std::log1p(e), nll2 = std::log1p(1.0 / e);
  EXPECT_NEAR(cross_entropy(logits, {0, 1, 1}, {1, 3}).item(), (nll0 + 3 * nll1 + 3 * nll2) / 7.0, 1e-6);
  EXPECT_NEAR(cross_entropy(logits, {0, 1, 1}).item(), (nll0 + nll1 + nll2) / 3.0, 1e-6);
}

TEST(Loss, CrossEntropyUniformClassWeightsEqualNoWeights) {
  Tensor logits = random_tensor({4, 3, 5}, 11);
  const std::vector<int32_t> targets = spread_targets(logits);
  EXPECT_NEAR(cross_entropy(logits, targets, {2.5f, 2.5f, 2.5f}).item(), cross_entropy(logits, targets).item(),
              1e-6);
}

TEST(Loss, CrossEntropyOnALargeVolumeMatchesAReferenceLoop) {
  // 2 x 30 x 30 positions: several blocks per sample, the last one partial.
  Tensor logits = random_tensor({2, 3, 30, 30}, 5, -3.0f, 3.0f);
  const std::vector<int32_t> targets = spread_targets(logits);
  const std::vector<float> w{0.2f, 1.0f, 3.0f};
  double num = 0.0, den = 0.0;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t s = 0; s < 900; ++s) {
      const int32_t t = targets[n * 900 + s];
      num -= w[t] * std::log(softmax_at(logits, n, s)[t]);
      den += w[t];
    }
  EXPECT_NEAR(cross_entropy(logits, targets, w).item(), num / den, 1e-5);
}

TEST(Loss, CrossEntropyWeightedGradientMatchesFiniteDifferencesOn2d) {
  std::vector<int32_t> targets{2, 0, 1, 2, 2, 1, 0};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return cross_entropy(in[0], targets, {0.5f, 2.0f, 1.25f}); },
                        {param({7, 3}, 4)}));
}

TEST(Loss, CrossEntropyWeightedGradientMatchesFiniteDifferencesOn3dVolume) {
  Tensor x = param({2, 3, 3, 2, 5}, 6);
  std::vector<int32_t> targets = spread_targets(x);
  EXPECT_TRUE(
      gradcheck([&](const TensorList& in) { return cross_entropy(in[0], targets, {0.5f, 2.0f, 1.0f}); }, {x},
                kTight));
}

TEST(Loss, CrossEntropyTargetCountErrorNamesTheShapes) {
  const std::string msg =
      invalid_argument_message([] { cross_entropy(Tensor::zeros({2, 3, 4}), std::vector<int32_t>(5, 0), {}); });
  EXPECT_NE(msg.find("[2, 3, 4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected 8"), std::string::npos) << msg;
}

TEST(Loss, CrossEntropyOutOfRangeTargetErrorNamesTheIndexAndShape) {
  const std::string msg = invalid_argument_message([] { cross_entropy(Tensor::zeros({2, 3}), {1, 3}, {}); });
  EXPECT_NE(msg.find("target[1] = 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
}

TEST(Loss, CrossEntropyRejectsWrongClassWeightCountNamingTheShape) {
  const std::string msg = invalid_argument_message([] { cross_entropy(Tensor::zeros({2, 3}), {0, 1}, {1, 1}); });
  EXPECT_NE(msg.find("2 class weights"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
}

TEST(Loss, CrossEntropyRejectsNegativeClassWeights) {
  EXPECT_THROW(cross_entropy(Tensor::zeros({2, 3}), {0, 1}, {1, -1, 1}), std::invalid_argument);
}

// ---- bce_with_logits ----

TEST(Loss, BceWithLogitsMatchesHandComputedValue) {
  // max(x, 0) - x t + log(1 + e^-|x|) at (x, t) = (0, 1): log 2; (2, 0): 2 + log(1 + e^-2);
  // (-1, 0.5): 0.5 + log(1 + e^-1). The loss is their mean.
  Tensor x = Tensor::from_vector({3}, {0, 2, -1});
  Tensor t = Tensor::from_vector({3}, {1, 0, 0.5f});
  const double expected =
      (std::log(2.0) + 2.0 + std::log1p(std::exp(-2.0)) + 0.5 + std::log1p(std::exp(-1.0))) / 3.0;
  EXPECT_NEAR(bce_with_logits(x, t).item(), expected, 1e-6);
}

TEST(Loss, BceWithLogitsIsStableForLargeLogits) {
  EXPECT_NEAR(bce_with_logits(Tensor::from_vector({2}, {100, -100}), Tensor::from_vector({2}, {1, 0})).item(), 0.0,
              1e-6);
  EXPECT_NEAR(bce_with_logits(Tensor::from_vector({1}, {100}), Tensor::from_vector({1}, {0})).item(), 100.0, 1e-4);
}

TEST(Loss, BceWithLogitsGradientMatchesFiniteDifferencesForBothInputs) {
  // Targets stay inside [0, 1] under the ±eps nudges.
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return bce_with_logits(in[0], in[1]); },
                        {param({3, 1, 4, 5}, 8, -3.0f, 3.0f), param({3, 1, 4, 5}, 9, 0.1f, 0.9f)}));
}

TEST(Loss, BceWithLogitsRejectsShapeMismatchNamingBothShapes) {
  const std::string msg =
      invalid_argument_message([] { bce_with_logits(Tensor::zeros({2, 3}), Tensor::zeros({3, 2})); });
  EXPECT_NE(msg.find("[2, 3] and [3, 2]"), std::string::npos) << msg;
}

TEST(Loss, BceWithLogitsRejectsTargetsOutsideTheUnitInterval) {
  EXPECT_THROW(bce_with_logits(Tensor::zeros({2}), Tensor::from_vector({2}, {0.5f, 1.5f})), std::invalid_argument);
  EXPECT_THROW(bce_with_logits(Tensor::zeros({2}), Tensor::from_vector({2}, {-0.1f, 0})), std::invalid_argument);
}

// ---- mse_loss ----

TEST(Loss, MseLossMatchesHandComputedValue) {
  // Differences 0, 2, -3: (0 + 4 + 9) / 3.
  EXPECT_NEAR(mse_loss(Tensor::from_vector({3}, {1, 2, 3}), Tensor::from_vector({3}, {1, 0, 6})).item(), 13.0 / 3.0,
              1e-6);
}

TEST(Loss, MseLossGradientMatchesFiniteDifferencesForBothInputs) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return mse_loss(in[0], in[1]); },
                        {param({2, 3, 5}, 12), param({2, 3, 5}, 13)}));
}

TEST(Loss, MseLossRejectsShapeMismatchNamingBothShapes) {
  const std::string msg = invalid_argument_message([] { mse_loss(Tensor::zeros({2, 3}), Tensor::zeros({6})); });
  EXPECT_NE(msg.find("[2, 3] and [6]"), std::string::npos) << msg;
}

// ---- soft_dice_loss ----

// logits (N=1, C=2, W=2): channel 0 = [0, ln 3], channel 1 = [ln 3, 0], so
// p1 = [3/4, 1/4] and p0 = [1/4, 3/4]; targets [1, 1].
// Class 1: 2 sum p t = 2, sum p + sum t = 1 + 2 = 3. Class 0: 2 sum p t = 0, sums 1 + 0.
Tensor dice_case() {
  const float l3 = std::log(3.0f);
  return Tensor::from_vector({1, 2, 2}, {0, l3, l3, 0});
}

TEST(Loss, SoftDiceMatchesHandComputedValue) {
  // Class 1 only: 1 - 2/3 with smooth 0; 1 - (2 + 1)/(3 + 1) = 1/4 with smooth 1.
  EXPECT_NEAR(soft_dice_loss(dice_case(), {1, 1}, false, 0.0f).item(), 1.0 / 3.0, 1e-6);
  EXPECT_NEAR(soft_dice_loss(dice_case(), {1, 1}, false, 1.0f).item(), 0.25, 1e-6);
}

TEST(Loss, SoftDiceIncludeBackgroundAlsoScoresClassZero) {
  // Class 0 scores 0/1 (smooth 0) or (0 + 1)/(1 + 1) (smooth 1), averaged with class 1.
  EXPECT_NEAR(soft_dice_loss(dice_case(), {1, 1}, true, 0.0f).item(), 1.0 - (0.0 + 2.0 / 3.0) / 2.0, 1e-6);
  EXPECT_NEAR(soft_dice_loss(dice_case(), {1, 1}, true, 1.0f).item(), 1.0 - (0.5 + 0.75) / 2.0, 1e-6);
}

TEST(Loss, SoftDicePerfectPredictionIsNearZero) {
  Tensor logits = Tensor::zeros({2, 3, 3, 4, 5});
  const std::vector<int32_t> targets = spread_targets(logits);
  const int64_t S = 60;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t s = 0; s < S; ++s) logits.data()[(n * 3 + targets[n * S + s]) * S + s] = 20.0f;
  EXPECT_NEAR(soft_dice_loss(logits, targets).item(), 0.0, 1e-5);
  EXPECT_NEAR(soft_dice_loss(logits, targets, true).item(), 0.0, 1e-5);
}

TEST(Loss, SoftDiceOnALargeVolumeMatchesAReferenceLoop) {
  Tensor logits = random_tensor({2, 4, 5, 13, 11}, 21, -2.0f, 2.0f);
  const std::vector<int32_t> targets = spread_targets(logits);
  const int64_t C = 4, S = 5 * 13 * 11;
  const double smooth = 1e-5;
  std::vector<double> inter(C), psum(C), tsum(C);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t s = 0; s < S; ++s) {
      const std::vector<double> p = softmax_at(logits, n, s);
      const int32_t t = targets[n * S + s];
      for (int64_t c = 0; c < C; ++c) psum[c] += p[c];
      inter[t] += p[t];
      tsum[t] += 1.0;
    }
  double score = 0.0;
  for (int64_t c = 1; c < C; ++c) score += (2 * inter[c] + smooth) / (psum[c] + tsum[c] + smooth);
  EXPECT_NEAR(soft_dice_loss(logits, targets).item(), 1.0 - score / 3.0, 1e-5);
}

TEST(Loss, SoftDiceGradientMatchesFiniteDifferencesOn2d) {
  Tensor x = param({7, 3}, 14, -2.0f, 2.0f);
  const std::vector<int32_t> targets = spread_targets(x);
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return soft_dice_loss(in[0], targets); }, {x}, kTight));
  EXPECT_TRUE(
      gradcheck([&](const TensorList& in) { return soft_dice_loss(in[0], targets, true, 1.0f); }, {x}, kTight));
}

TEST(Loss, SoftDiceGradientMatchesFiniteDifferencesOn3dVolume) {
  Tensor x = param({2, 3, 3, 2, 5}, 15, -2.0f, 2.0f);
  const std::vector<int32_t> targets = spread_targets(x);
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return soft_dice_loss(in[0], targets); }, {x}, kTight));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return soft_dice_loss(in[0], targets, true); }, {x}, kTight));
}

TEST(Loss, SoftDicePerSampleIsTheMeanOfEachSamplesLoss) {
  const Tensor logits = random_tensor({3, 3, 4, 3, 5}, 41, -2.0f, 2.0f);
  const int64_t per = logits.numel() / 3, labels = per / 3;
  // Samples unlike each other: mostly class 1 in the first, mostly class 2 in the others.
  std::vector<int32_t> targets(static_cast<size_t>(3 * labels));
  for (int64_t i = 0; i < 3 * labels; ++i) targets[i] = i % 4 == 0 ? 0 : i < labels ? 1 : (i % 7 == 0 ? 1 : 2);
  double mean = 0.0;
  for (int64_t n = 0; n < 3; ++n) {
    const std::vector<float> all = logits.to_vector();
    const Tensor one = Tensor::from_vector({1, 3, 4, 3, 5}, std::vector<float>(all.begin() + n * per,
                                                                               all.begin() + (n + 1) * per));
    mean += soft_dice_loss(one, std::vector<int32_t>(targets.begin() + n * labels,
                                                     targets.begin() + (n + 1) * labels))
                .item();
  }
  EXPECT_NEAR(soft_dice_loss(logits, targets, false, 1e-5f, true).item(), mean / 3.0, 1e-6);
  // Pooled over the batch, the sums mix the samples: a different value.
  EXPECT_GT(std::abs(soft_dice_loss(logits, targets).item() - mean / 3.0), 1e-2);
}

TEST(Loss, SoftDicePerSampleGradientMatchesFiniteDifferencesOn3dVolume) {
  Tensor x = param({3, 3, 3, 2, 4}, 16, -2.0f, 2.0f);
  const std::vector<int32_t> targets = spread_targets(x);
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return soft_dice_loss(in[0], targets, false, 1e-5f, true); },
                        {x}, kTight));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return soft_dice_loss(in[0], targets, true, 1.0f, true); },
                        {x}, kTight));
}

TEST(Loss, SoftDiceRejectsASingleClassWhenBackgroundIsExcluded) {
  EXPECT_THROW(soft_dice_loss(Tensor::zeros({1, 1, 4}), {0, 0, 0, 0}), std::invalid_argument);
  EXPECT_NO_THROW(soft_dice_loss(Tensor::zeros({1, 1, 4}), {0, 0, 0, 0}, true));
}

TEST(Loss, SoftDiceBadTargetsErrorNamesTheShape) {
  const std::string count = invalid_argument_message([] { soft_dice_loss(Tensor::zeros({1, 2, 3, 3}), {0, 1}); });
  EXPECT_NE(count.find("[1, 2, 3, 3]"), std::string::npos) << count;
  const std::string range =
      invalid_argument_message([] { soft_dice_loss(Tensor::zeros({1, 2, 2}), {0, 2}); });
  EXPECT_NE(range.find("target[1] = 2"), std::string::npos) << range;
}

// ---- all ----

TEST(Loss, ClassLossesDoNotDependOnTheThreadCount) {
  Tensor logits = random_tensor({2, 3, 16, 16, 16}, 31);
  const std::vector<int32_t> targets = spread_targets(logits);
  const int saved = compute_threads();
  set_compute_threads(1);
  const float ce1 = cross_entropy(logits, targets, {1, 2, 3}).item();
  const float dice1 = soft_dice_loss(logits, targets).item();
  set_compute_threads(2);
  const float ce2 = cross_entropy(logits, targets, {1, 2, 3}).item();
  const float dice2 = soft_dice_loss(logits, targets).item();
  set_compute_threads(saved);
  EXPECT_EQ(ce1, ce2);
  EXPECT_EQ(dice1, dice2);
}

}  // namespace
}  // namespace quartet::engine

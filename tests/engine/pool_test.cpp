#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>

#include "engine/autograd.h"
#include "engine/memory.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::expect_near;
using testing::gradcheck;
using testing::GradcheckOptions;
using testing::leaf;
using testing::param;
using testing::random_tensor;
using testing::throws_invalid_argument;

// A shuffled ramp with steps of 0.1: distinct values far apart compared with the
// finite-difference eps, so nudging one never changes which cell wins a window.
Tensor distinct_values(const Shape& shape, uint64_t seed) {
  const int64_t n = shape_numel(shape);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.1f * static_cast<float>(i - n / 2);
  Generator gen(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[gen.below(static_cast<uint64_t>(i + 1))]);
  return leaf(shape, v);
}

// ---- ReLU then max pooling in a Sequential (run as max pooling then ReLU) ----

// The same modules called one by one (ReLU's output made and pooled) and through a
// Sequential: the same outputs and input gradients bit for bit, with windows whose
// maximum is positive, zero (ties with negatives) or negative, and a NaN.
void expect_relu_pool_commutes(const Shape& shape, PoolOptions pool) {
  const int64_t n = shape_numel(shape);
  std::vector<float> v(n);
  Generator gen(7);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int64_t>(gen.below(9)) - 5) * 0.5f;
  v[3] = std::numeric_limits<float>::quiet_NaN();
  auto relu_m = std::make_shared<ReLU>();
  auto pool_m = std::make_shared<MaxPool>(pool);
  Sequential seq;
  seq.add(relu_m).add(pool_m);
  Tensor a = leaf(shape, v), b = leaf(shape, v);
  Tensor ya = pool_m->forward(relu_m->forward(a));
  Tensor yb = seq.forward(b);
  ASSERT_EQ(ya.shape(), yb.shape());
  const std::vector<float> va = ya.to_vector(), vb = yb.to_vector();
  for (size_t i = 0; i < va.size(); ++i)
    ASSERT_TRUE(va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i]))) << i << ": " << va[i] << " vs " << vb[i];
  Tensor g = random_tensor(ya.shape(), 11);
  ya.backward(g);
  yb.backward(g);
  EXPECT_EQ(a.grad().to_vector(), b.grad().to_vector());
  int64_t nonzero = 0;
  for (float d : a.grad().to_vector()) nonzero += d != 0.0f;
  EXPECT_GT(nonzero, 0);
}

TEST(MaxPool, ReluThenMaxPool2dInASequentialEqualsTheModulesOneByOne) {
  expect_relu_pool_commutes({2, 3, 8, 6}, {.kernel = {2}});
  expect_relu_pool_commutes({1, 2, 7, 7}, {.kernel = {3}, .stride = {2}, .padding = {1}});
}

TEST(MaxPool, ReluThenMaxPool3dInASequentialEqualsTheModulesOneByOne) {
  expect_relu_pool_commutes({1, 2, 4, 6, 4}, {.kernel = {2}});
}

TEST(MaxPool, ReluThenMaxPoolInASequentialKeepsNoFullSizeActivation) {
  Sequential seq;
  seq.emplace<ReLU>().emplace<MaxPool>(PoolOptions{.kernel = {2}});
  Tensor x = random_tensor({4, 8, 32, 32}, 3);
  x.set_requires_grad(true);
  const auto activations = static_cast<size_t>(MemTag::activations);
  reset_memory_peaks();
  const int64_t before = memory_stats().current[activations];
  Tensor y = seq.forward(x);
  // The pooled output, its ReLU and the argmax: each a quarter of x's size. One by one,
  // ReLU's output (x's size) comes first: 1.5 times x in all.
  EXPECT_LT(memory_stats().peak[activations] - before, x.numel() * 4);
}

// ---- forward by hand ----

TEST(MaxPool, MaxPool2dForwardMatchesHandComputedValues) {
  // Channel 0 below, channel 1 its negation.
  const std::vector<float> c0{1, 5, 2, 0,  //
                              3, 4, 8, 6,  //
                              9, 0, 1, 2,  //
                              7, 11, 3, 10};
  std::vector<float> v = c0;
  for (float f : c0) v.push_back(-f);
  Tensor y = max_pool2d(Tensor::from_vector({1, 2, 4, 4}, v), {.kernel = {2}});
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{5, 8, 11, 10, -1, 0, 0, -1}));
}

TEST(MaxPool, MaxPool2dPaddedCellsNeverWin) {
  // Every window holds the whole image plus padding; zero padding would win over it.
  Tensor x = Tensor::from_vector({1, 1, 2, 2}, {-1, -2, -3, -4});
  Tensor y = max_pool2d(x, {.kernel = {3}, .stride = {1}, .padding = {1}});
  EXPECT_EQ(y.to_vector(), (std::vector<float>{-1, -1, -1, -1}));
}

TEST(MaxPool, MaxPool2dDefaultStrideEqualsKernelAndFloorsOutput) {
  Tensor y = max_pool2d(Tensor::zeros({2, 3, 5, 5}), {.kernel = {2}});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2, 2}));
}

TEST(MaxPool, MaxPool3dForwardMatchesHandComputedValues) {
  // x (D=2, H=2, W=4); two 2x2x2 windows.
  Tensor x = Tensor::from_vector({1, 1, 2, 2, 4}, {3, 1, 4, 1, 5, 9, 2, 6,  // d = 0
                                                   5, 3, 5, 8, 0, 7, 2, 3});  // d = 1
  Tensor y = max_pool(x, {.kernel = {2}});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 1, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{9, 8}));
}

TEST(MaxPool, MaxPool1dWithPaddingMatchesHandComputedValues) {
  // Windows {pad, 3, -1}, {-1, 4, 1}, {1, -5, pad}.
  Tensor x = Tensor::from_vector({1, 1, 5}, {3, -1, 4, 1, -5});
  Tensor y = max_pool(x, {.kernel = {3}, .stride = {2}, .padding = {1}});
  EXPECT_EQ(y.to_vector(), (std::vector<float>{3, 4, 1}));
}

TEST(MaxPool, MaxPool2dPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor y = max_pool2d(Tensor::from_vector({1, 1, 2, 2}, {1, nan, 3, 2}), {.kernel = {2}});
  EXPECT_TRUE(std::isnan(y.item()));
}

// ---- gradients ----

TEST(MaxPool, MaxPool2dGradientGoesToFirstMaximumOfEachWindow) {
  // Windows {1, 7, 7, 2} and {7, 0, 3, 7}: each has two maxima; the first in row-major
  // window order takes the gradient.
  Tensor x = leaf({1, 1, 2, 4}, {1, 7, 7, 0,  //
                                 7, 2, 3, 7});
  sum(max_pool2d(x, {.kernel = {2}})).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0, 1, 1, 0, 0, 0, 0, 0}));
}

TEST(MaxPool, MaxPool2dOverlappingWindowsSumTheirGradients) {
  // Both windows of width 2 pick the 9.
  Tensor x = leaf({1, 1, 1, 3}, {0, 9, 1});
  Tensor y = max_pool2d(x, {.kernel = {1, 2}, .stride = {1}});
  EXPECT_EQ(y.to_vector(), (std::vector<float>{9, 9}));
  y.backward(Tensor::from_vector({1, 1, 1, 2}, {1, 2}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0, 3, 0}));
}

TEST(MaxPool, MaxPool2dGradientsMatchFiniteDifferences) {
  const PoolOptions opt{.kernel = {3}, .stride = {2}, .padding = {1}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return max_pool2d(in[0], opt); },
                        {distinct_values({2, 3, 7, 6}, 1)}, GradcheckOptions{.eps = 1e-3f}));
}

TEST(MaxPool, MaxPool3dGradientsMatchFiniteDifferences) {
  const PoolOptions opt{.kernel = {2, 3, 2}, .stride = {1, 2, 2}, .padding = {1, 1, 0}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return max_pool(in[0], opt); },
                        {distinct_values({1, 2, 5, 6, 4}, 2)}, GradcheckOptions{.eps = 1e-3f}));
}

// ---- bad input ----

// 2x2 windows with stride 2 take a vectorised path; a (1, 2, 2) kernel over a volume
// of depth 2 takes the general one. Both must agree on values and on which cell gets the
// gradient, with ties and NaNs everywhere and row widths on both sides of 16 outputs.
TEST(MaxPool, MaxPool2x2FastPathMatchesGeneralPathOnTiesAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Generator gen(11);
  for (int64_t w : {2, 3, 14, 31, 33, 64}) {
    for (int64_t h : {2, 5, 28}) {
      const int64_t planes = 6;
      std::vector<float> v(planes * h * w), v3;
      for (float& x : v) {
        const uint64_t r = gen.below(20);
        x = r == 0 ? nan : static_cast<float>(r % 4);  // few distinct values: many ties
      }
      for (int64_t p = 0; p < planes; ++p)  // each plane twice along depth
        for (int d = 0; d < 2; ++d) v3.insert(v3.end(), v.begin() + p * h * w, v.begin() + (p + 1) * h * w);
      Tensor x2 = leaf({2, 3, h, w}, v), x3 = leaf({2, 3, 2, h, w}, v3);
      const std::vector<float> y2 = max_pool2d(x2, {.kernel = {2}}).to_vector();
      Tensor y3t = max_pool(x3, {.kernel = {1, 2, 2}});
      const std::vector<float> y3 = y3t.to_vector();
      sum(max_pool2d(x2, {.kernel = {2}})).backward();
      sum(y3t).backward();
      const std::vector<float> g2 = x2.grad().to_vector(), g3 = x3.grad().to_vector();
      const int64_t out = (h / 2) * (w / 2);
      for (int64_t p = 0; p < planes; ++p) {
        for (int64_t o = 0; o < out; ++o) {
          const float a = y2[p * out + o], b = y3[2 * p * out + o];
          ASSERT_TRUE((std::isnan(a) && std::isnan(b)) || a == b) << "w " << w << " h " << h << " output " << o;
        }
        for (int64_t i = 0; i < h * w; ++i)
          ASSERT_EQ(g2[p * h * w + i], g3[2 * p * h * w + i]) << "w " << w << " h " << h << " cell " << i;
      }
    }
  }
}

TEST(MaxPool, MaxPool2dRejectsInputOfWrongRank) {
  EXPECT_TRUE(throws_invalid_argument([] { max_pool2d(Tensor::zeros({3, 4})); },
                                      {"max_pool2d: input (N, C, H, W) expected, got [3, 4]"}));
}

TEST(MaxPool, MaxPoolRejectsInputWithoutSpatialDims) {
  EXPECT_TRUE(throws_invalid_argument([] { max_pool(Tensor::zeros({2, 3}), {}); }, {"max_pool:", "[2, 3]"}));
}

TEST(MaxPool, MaxPoolRejectsZeroKernel) {
  EXPECT_TRUE(throws_invalid_argument([] { max_pool2d(Tensor::zeros({1, 1, 4, 4}), {.kernel = {0}}); },
                                      {"max_pool2d", "kernel", "[0]", "[1, 1, 4, 4]"}));
}

TEST(MaxPool, MaxPoolRejectsZeroStride) {
  EXPECT_TRUE(throws_invalid_argument(
      [] { max_pool2d(Tensor::zeros({1, 1, 4, 4}), {.kernel = {2}, .stride = {0, 1}}); },
      {"max_pool2d", "stride", "[0, 1]", "[1, 1, 4, 4]"}));
}

TEST(MaxPool, MaxPoolRejectsNegativePadding) {
  EXPECT_TRUE(throws_invalid_argument(
      [] { max_pool2d(Tensor::zeros({1, 1, 4, 4}), {.kernel = {2}, .padding = {-1}}); },
      {"max_pool2d", "padding", "[-1]", "[1, 1, 4, 4]"}));
}

TEST(MaxPool, MaxPoolRejectsPaddingPastHalfTheKernel) {
  EXPECT_TRUE(throws_invalid_argument(
      [] { max_pool2d(Tensor::zeros({1, 1, 4, 4}), {.kernel = {3}, .padding = {2}}); },
      {"max_pool2d", "padding [2, 2]", "kernel [3, 3]", "[1, 1, 4, 4]"}));
}

TEST(MaxPool, MaxPoolRejectsKernelLargerThanInput) {
  EXPECT_TRUE(throws_invalid_argument([] { max_pool2d(Tensor::zeros({1, 1, 2, 5}), {.kernel = {3}}); },
                                      {"max_pool2d", "along H", "[1, 1, 2, 5]", "[3, 3]"}));
}

TEST(MaxPool, MaxPoolRejectsWrongNumberOfKernelValues) {
  EXPECT_TRUE(throws_invalid_argument(
      [] { max_pool(Tensor::zeros({1, 1, 4, 4, 4}), {.kernel = {2, 2}}); },
      {"max_pool3d", "kernel expects 1 or 3 values, got 2", "[1, 1, 4, 4, 4]"}));
}

// ---- average pooling ----

TEST(AvgPool, AvgPool2dForwardMatchesHandComputedValues) {
  Tensor x = Tensor::from_vector({1, 1, 4, 4}, {1, 5, 2, 0,  //
                                                3, 4, 8, 6,  //
                                                9, 0, 1, 2,  //
                                                7, 11, 3, 10});
  Tensor y = avg_pool(x, {.kernel = {2}});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{13 / 4.0f, 16 / 4.0f, 27 / 4.0f, 16 / 4.0f}));
}

TEST(AvgPool, AvgPool2dPaddedCellsCountAsZeros) {
  // Every 3x3 window covers the four ones and five padded cells.
  Tensor y = avg_pool(Tensor::full({1, 1, 2, 2}, 1.0f), {.kernel = {3}, .stride = {1}, .padding = {1}});
  expect_near(y.to_vector(), {4 / 9.0f, 4 / 9.0f, 4 / 9.0f, 4 / 9.0f}, 1e-6f);
}

TEST(AvgPool, AvgPool1dWithPaddingMatchesHandComputedValues) {
  // Windows {pad, 3, -1}, {-1, 4, 1}, {1, -5, pad}, each divided by 3.
  Tensor x = Tensor::from_vector({1, 1, 5}, {3, -1, 4, 1, -5});
  Tensor y = avg_pool(x, {.kernel = {3}, .stride = {2}, .padding = {1}});
  expect_near(y.to_vector(), {2 / 3.0f, 4 / 3.0f, -4 / 3.0f}, 1e-6f);
}

TEST(AvgPool, AvgPool3dForwardMatchesHandComputedValues) {
  // x (D=2, H=2, W=4); two 2x2x2 blocks summing to 33 and 31.
  Tensor x = Tensor::from_vector({1, 1, 2, 2, 4}, {3, 1, 4, 1, 5, 9, 2, 6,  // d = 0
                                                   5, 3, 5, 8, 0, 7, 2, 3});  // d = 1
  Tensor y = avg_pool(x, {.kernel = {2}});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 1, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{33 / 8.0f, 31 / 8.0f}));
}

TEST(AvgPool, AvgPool2dGradientSpreadsEvenlyOverTheWindow) {
  Tensor x = leaf({1, 1, 2, 2}, {1, 2, 3, 4});
  avg_pool(x, {.kernel = {2}}).backward(Tensor::from_vector({1, 1, 1, 1}, {2}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));
}

TEST(AvgPool, AvgPool2dGradientsMatchFiniteDifferences) {
  const PoolOptions opt{.kernel = {3}, .stride = {2}, .padding = {1}};
  EXPECT_TRUE(
      gradcheck([&](const TensorList& in) { return avg_pool(in[0], opt); }, {param({2, 3, 7, 6}, 1)}));
}

TEST(AvgPool, AvgPool3dGradientsMatchFiniteDifferences) {
  const PoolOptions opt{.kernel = {2, 3, 2}, .stride = {1, 2, 2}, .padding = {1, 1, 0}};
  EXPECT_TRUE(
      gradcheck([&](const TensorList& in) { return avg_pool(in[0], opt); }, {param({1, 2, 5, 6, 3}, 2)}));
}

TEST(AvgPool, AvgPoolRejectsInputOfWrongRank) {
  EXPECT_TRUE(throws_invalid_argument([] { avg_pool(Tensor::zeros({3, 4}), {}); },
                                      {"avg_pool: input (N, C, *spatial)", "[3, 4]"}));
}

TEST(AvgPool, AvgPoolRejectsPaddingPastHalfTheKernel) {
  EXPECT_TRUE(throws_invalid_argument(
      [] { avg_pool(Tensor::zeros({1, 1, 4, 4, 4}), {.kernel = {2}, .padding = {2}}); },
      {"avg_pool3d", "padding [2, 2, 2]", "kernel [2, 2, 2]", "[1, 1, 4, 4, 4]"}));
}

TEST(AvgPool, AvgPoolModuleAppliesTheOp) {
  Tensor x = random_tensor({1, 2, 4, 4}, 3);
  EXPECT_EQ(AvgPool({.kernel = {2}})(x).to_vector(), avg_pool(x, {.kernel = {2}}).to_vector());
}

// ---- global average pooling ----

TEST(GlobalAvgPool, GlobalAvgPool2dAveragesEachPlane) {
  // Planes (0, 0) = 1..6 and (0, 1) = its negation.
  Tensor x = Tensor::from_vector({1, 2, 2, 3}, {1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6});
  Tensor y = global_avg_pool(x);
  EXPECT_EQ(y.shape(), (Shape{1, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{3.5f, -3.5f}));
}

TEST(GlobalAvgPool, GlobalAvgPool3dAveragesEachVolume) {
  std::vector<float> v(2 * 8);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i);
  Tensor y = global_avg_pool(Tensor::from_vector({2, 1, 2, 2, 2}, v));
  EXPECT_EQ(y.shape(), (Shape{2, 1}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{3.5f, 11.5f}));
}

TEST(GlobalAvgPool, GlobalAvgPool2dGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(
      gradcheck([](const TensorList& in) { return global_avg_pool(in[0]); }, {param({2, 3, 5, 3}, 1)}));
}

TEST(GlobalAvgPool, GlobalAvgPool3dGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(
      gradcheck([](const TensorList& in) { return global_avg_pool(in[0]); }, {param({2, 2, 3, 3, 5}, 2)}));
}

TEST(GlobalAvgPool, GlobalAvgPoolRejectsInputWithoutSpatialDims) {
  EXPECT_TRUE(throws_invalid_argument([] { global_avg_pool(Tensor::zeros({2, 3})); },
                                      {"global_avg_pool: input (N, C, *spatial)", "[2, 3]"}));
}

TEST(GlobalAvgPool, GlobalAvgPoolModuleMapsToBatchByChannels) {
  EXPECT_EQ(GlobalAvgPool()(Tensor::zeros({4, 3, 2, 2, 2})).shape(), (Shape{4, 3}));
}

}  // namespace
}  // namespace quartet::engine

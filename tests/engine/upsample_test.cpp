#include <gtest/gtest.h>

#include <initializer_list>
#include <stdexcept>
#include <string>

#include "engine/autograd.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::expect_near;
using testing::gradcheck;
using testing::param;
using testing::random_tensor;
using testing::throws_invalid_argument;

Tensor two_by_two() { return Tensor::from_vector({1, 1, 2, 2}, {1, 2, 3, 4}); }

// ---- forward by hand ----

TEST(Upsample, NearestScaleTwoRepeatsEachPixel) {
  Tensor y = upsample(two_by_two(), {2}, UpsampleMode::nearest);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 1, 2, 2,  //
                                               1, 1, 2, 2,  //
                                               3, 3, 4, 4,  //
                                               3, 3, 4, 4}));
}

TEST(Upsample, BilinearScaleTwoMatchesPyTorchWithoutAlignCorners) {
  // Source rows/columns (o + 0.5) / 2 - 0.5 = 0 (clamped), 0.25, 0.75, 1.25 (next cell
  // clamped): F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False).
  Tensor y = upsample(two_by_two(), {2}, UpsampleMode::linear);
  expect_near(y.to_vector(), {1.0f, 1.25f, 1.75f, 2.0f,  //
                              1.5f, 1.75f, 2.25f, 2.5f,  //
                              2.5f, 2.75f, 3.25f, 3.5f,  //
                              3.0f, 3.25f, 3.75f, 4.0f},
              1e-6f);
}

TEST(Upsample, LinearScaleThreeMatchesPyTorchWithoutAlignCorners) {
  // Source positions max((o + 0.5) / 3 - 0.5, 0) = 0, 0, 1/3, 2/3, 1, 4/3 (clamped to 1).
  Tensor y = upsample(Tensor::from_vector({1, 1, 2}, {1, 2}), {3}, UpsampleMode::linear);
  expect_near(y.to_vector(), {1, 1, 4 / 3.0f, 5 / 3.0f, 2, 2}, 1e-6f);
}

TEST(Upsample, TrilinearInterpolatesAlongDepth) {
  // Slices of zeros then ones: along depth 0, 0.25, 0.75, 1; constant over H and W.
  Tensor x = Tensor::from_vector({1, 1, 2, 2, 2}, {0, 0, 0, 0, 1, 1, 1, 1});
  Tensor y = upsample(x, {2}, UpsampleMode::linear);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4, 4}));
  const std::vector<float> v = y.to_vector();
  const float depth[] = {0, 0.25f, 0.75f, 1};
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_NEAR(v[i], depth[i / 16], 1e-6f) << "element " << i;
}

TEST(Upsample, NearestTakesOneScalePerDim) {
  Tensor x = Tensor::from_vector({1, 1, 1, 2, 1}, {5, 7});
  Tensor y = upsample(x, {2, 1, 3}, UpsampleMode::nearest);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2, 3}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{5, 5, 5, 7, 7, 7, 5, 5, 5, 7, 7, 7}));
}

TEST(Upsample, NearestGradientSumsEachBlock) {
  Tensor x = param({1, 1, 2, 2}, 1);
  std::vector<float> g(16);
  for (int i = 0; i < 16; ++i) g[i] = static_cast<float>(i);
  upsample(x, {2}, UpsampleMode::nearest).backward(Tensor::from_vector({1, 1, 4, 4}, g));
  // Blocks {0, 1, 4, 5}, {2, 3, 6, 7}, {8, 9, 12, 13}, {10, 11, 14, 15}.
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{10, 18, 42, 50}));
}

// ---- gradients by finite differences ----

TEST(Upsample, Nearest2dGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return upsample(in[0], {2, 3}, UpsampleMode::nearest); },
                        {param({2, 2, 3, 5}, 1)}));
}

TEST(Upsample, Nearest3dGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return upsample(in[0], {2}, UpsampleMode::nearest); },
                        {param({1, 2, 3, 2, 3}, 2)}));
}

TEST(Upsample, Bilinear2dGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return upsample(in[0], {2, 3}, UpsampleMode::linear); },
                        {param({2, 2, 3, 5}, 3)}));
}

TEST(Upsample, Trilinear3dGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return upsample(in[0], {2, 3, 2}, UpsampleMode::linear); },
                        {param({1, 2, 3, 2, 3}, 4)}));
}

// ---- bad input and the module ----

TEST(Upsample, RejectsInputWithoutSpatialDims) {
  EXPECT_TRUE(throws_invalid_argument([] { upsample(Tensor::zeros({2, 3}), {2}, UpsampleMode::nearest); },
                                      {"upsample: input (N, C, *spatial)", "[2, 3]"}));
}

TEST(Upsample, RejectsZeroScale) {
  EXPECT_TRUE(throws_invalid_argument([] { upsample(two_by_two(), {2, 0}, UpsampleMode::linear); },
                                      {"upsample", "scale", "[2, 0]", "[1, 1, 2, 2]"}));
}

TEST(Upsample, RejectsWrongNumberOfScales) {
  EXPECT_TRUE(throws_invalid_argument([] { upsample(two_by_two(), {2, 2, 2}, UpsampleMode::linear); },
                                      {"upsample", "scale expects 1 or 2 values, got 3", "[1, 1, 2, 2]"}));
}

TEST(Upsample, ModuleAppliesTheOp) {
  Upsample up({2}, UpsampleMode::linear);
  EXPECT_EQ(up(two_by_two()).to_vector(), upsample(two_by_two(), {2}, UpsampleMode::linear).to_vector());
}

}  // namespace
}  // namespace quartet::engine

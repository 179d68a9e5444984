#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "engine/autograd.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "engine/threads.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::expect_near;
using testing::gradcheck;
using testing::param;
using testing::random_tensor;
using testing::ThreadsScope;
using testing::throws_invalid_argument;

double dot(const Tensor& a, const Tensor& b) {
  double s = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a.data()[i]) * b.data()[i];
  return s;
}

// The transposed conv that undoes conv's shape for x: the same options, with the output
// padding that recovers the rows conv's floored division dropped. Options per dim.
ConvTransposeOptions transpose_of(const ConvOptions& opt, const Shape& x_shape, const Shape& w_shape) {
  ConvTransposeOptions t{.stride = opt.stride, .padding = opt.padding, .dilation = opt.dilation};
  t.output_padding.clear();
  for (size_t i = 0; i + 2 < x_shape.size(); ++i)
    t.output_padding.push_back(
        (x_shape[2 + i] + 2 * opt.padding[i] - opt.dilation[i] * (w_shape[2 + i] - 1) - 1) % opt.stride[i]);
  return t;
}

// <conv(x, w), y> == <x, conv_transpose(y, w)> for random x, y and one weight.
void expect_adjoint(const Shape& x_shape, const Shape& w_shape, const ConvOptions& opt) {
  Tensor x = random_tensor(x_shape, 1), w = random_tensor(w_shape, 2);
  Tensor cx = conv(x, w, Tensor(), opt);
  Tensor y = random_tensor(cx.shape(), 3);
  Tensor ty = conv_transpose(y, w, Tensor(), transpose_of(opt, x_shape, w_shape));
  ASSERT_EQ(ty.shape(), x.shape());
  const double lhs = dot(cx, y), rhs = dot(x, ty);
  EXPECT_NEAR(lhs, rhs, 1e-5 * (1.0 + std::abs(lhs)));
}

// ---- forward by hand ----

TEST(ConvTranspose, StrideTwoPlacesOneScaledKernelPerInputCell) {
  Tensor x = Tensor::from_vector({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor w = Tensor::from_vector({1, 1, 2, 2}, {1, 0, 0, 1});
  Tensor y = conv_transpose(x, w, Tensor(), {.stride = {2}});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 0, 2, 0,  //
                                               0, 1, 0, 2,  //
                                               3, 0, 4, 0,  //
                                               0, 3, 0, 4}));
}

TEST(ConvTranspose, StrideOneSumsOverlappingKernelCopiesAndAddsBias) {
  Tensor x = Tensor::from_vector({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor w = Tensor::full({1, 1, 2, 2}, 1.0f);
  Tensor y = conv_transpose(x, w, Tensor::from_vector({1}, {0.5f}), {});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1.5f, 3.5f, 2.5f, 4.5f, 10.5f, 6.5f, 3.5f, 7.5f, 4.5f}));
}

TEST(ConvTranspose, PaddingCropsTheBorder) {
  Tensor x = Tensor::from_vector({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor y = conv_transpose(x, Tensor::full({1, 1, 2, 2}, 1.0f), Tensor(), {.padding = {1}});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(y.item(), 10.0f);
}

TEST(ConvTranspose, OutputPaddingAppendsCellsAtTheEnd) {
  // Copies of [1 1 1] at 0 and 2, then one extra cell: (2 - 1) 2 + 2 + 1 + 1 = 6.
  Tensor x = Tensor::from_vector({1, 1, 2}, {1, 2});
  Tensor w = Tensor::full({1, 1, 3}, 1.0f);
  Tensor y = conv_transpose(x, w, Tensor(), {.stride = {2}, .output_padding = {1}});
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 1, 3, 2, 2, 0}));
}

TEST(ConvTranspose, PointwiseKernelWithOutputPaddingLeavesTheExtraCellZero) {
  // output_padding 1 is allowed by dilation 2 even at stride 1: one cell no input reaches.
  Tensor x = Tensor::from_vector({1, 1, 3}, {1, 2, 3});
  Tensor y = conv_transpose(x, Tensor::from_vector({1, 1, 1}, {2}), Tensor(),
                            {.output_padding = {1}, .dilation = {2}});
  EXPECT_EQ(y.to_vector(), (std::vector<float>{2, 4, 6, 0}));
}

TEST(ConvTranspose, WeightLayoutIsInputChannelsThenOutputChannels) {
  // out[co] = sum over ci of x[ci] w[ci][co], with w (Cin = 2, Cout = 3, 1, 1).
  Tensor x = Tensor::from_vector({1, 2, 1, 1}, {1, 2});
  Tensor w = Tensor::from_vector({2, 3, 1, 1}, {1, 2, 3, 4, 5, 6});
  Tensor y = conv_transpose(x, w, Tensor(), {});
  EXPECT_EQ(y.shape(), (Shape{1, 3, 1, 1}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{9, 12, 15}));
}

TEST(ConvTranspose, ConvTranspose3dMatchesHandComputedValues) {
  // A 2x1x1 kernel [1, 10] over depth with stride 2: each cell becomes (v, 10 v) in depth.
  Tensor x = Tensor::from_vector({1, 1, 2, 1, 2}, {1, 2, 3, 4});
  Tensor w = Tensor::from_vector({1, 1, 2, 1, 1}, {1, 10});
  Tensor y = conv_transpose3d(x, w, Tensor(), {.stride = {2, 1, 1}});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 1, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 2, 10, 20, 3, 4, 30, 40}));
}

// ---- the adjoint of conv ----

TEST(ConvTranspose, Conv2dAndConvTransposeAreAdjoint) {
  expect_adjoint({2, 3, 7, 6}, {4, 3, 3, 2}, {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}});
}

TEST(ConvTranspose, Conv3dAndConvTransposeAreAdjoint) {
  expect_adjoint({2, 2, 5, 6, 7}, {3, 2, 2, 3, 3},
                 {.stride = {2, 1, 3}, .padding = {1, 1, 0}, .dilation = {1, 2, 1}});
}

TEST(ConvTranspose, EqualsTheInputGradientOfConv) {
  const ConvOptions opt{.stride = {2, 3}, .padding = {1, 1}, .dilation = {1, 1}};
  Tensor x = param({2, 3, 8, 9}, 1), w = random_tensor({4, 3, 3, 3}, 2);
  Tensor y = conv(x, w, Tensor(), opt);
  Tensor g = random_tensor(y.shape(), 3);
  y.backward(g);
  Tensor t = conv_transpose(g, w, Tensor(), transpose_of(opt, x.shape(), w.shape()));
  expect_near(t.to_vector(), x.grad().to_vector(), 1e-5f);
}

TEST(ConvTranspose, WithSamplesSplitAcrossThreadsEqualsTheInputGradientOfConv) {
  // Enough samples and work (over 2^20 multiply-adds) for the batch to go to threads.
  ThreadsScope threads(2);
  const ConvOptions opt{.stride = {2}, .padding = {1}, .dilation = {1}};
  const ConvOptions opt2{.stride = {2, 2}, .padding = {1, 1}, .dilation = {1, 1}};
  Tensor x = param({4, 16, 32, 32}, 1), w = random_tensor({16, 16, 3, 3}, 2);
  Tensor y = conv(x, w, Tensor(), opt);
  Tensor g = random_tensor(y.shape(), 3);
  y.backward(g);
  Tensor t = conv_transpose(g, w, Tensor(), transpose_of(opt2, x.shape(), w.shape()));
  expect_near(t.to_vector(), x.grad().to_vector(), 1e-4f);
}

// ---- gradients by finite differences ----

TEST(ConvTranspose, ConvTranspose2dGradientsMatchFiniteDifferences) {
  const ConvTransposeOptions opt{
      .stride = {2, 1}, .padding = {1, 0}, .output_padding = {1, 0}, .dilation = {1, 2}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv_transpose(in[0], in[1], in[2], opt); },
                        {param({2, 3, 3, 4}, 1), param({3, 2, 3, 2}, 2), param({2}, 3)}));
}

TEST(ConvTranspose, ConvTranspose3dGradientsMatchFiniteDifferences) {
  const ConvTransposeOptions opt{
      .stride = {2, 1, 2}, .padding = {0, 1, 1}, .output_padding = {1, 0, 1}, .dilation = {1, 2, 1}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv_transpose3d(in[0], in[1], in[2], opt); },
                        {param({1, 2, 2, 3, 2}, 1), param({2, 3, 2, 2, 3}, 2), param({3}, 3)}));
}

TEST(ConvTranspose, ConvTranspose2dWithoutBiasGradientsMatchFiniteDifferences) {
  const ConvTransposeOptions opt{.stride = {2}, .padding = {1}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv_transpose(in[0], in[1], Tensor(), opt); },
                        {param({2, 2, 3, 3}, 1), param({2, 3, 3, 3}, 2)}));
}

TEST(ConvTranspose, PointwiseWithOutputPaddingGradientsMatchFiniteDifferences) {
  const ConvTransposeOptions opt{.output_padding = {1, 0}, .dilation = {2, 1}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv_transpose(in[0], in[1], in[2], opt); },
                        {param({2, 2, 3, 2}, 1), param({2, 3, 1, 1}, 2), param({3}, 3)}));
}

// ---- bad input ----

TEST(ConvTranspose, RejectsChannelMismatch) {
  Tensor x = Tensor::zeros({1, 3, 4, 4}), w = Tensor::zeros({2, 4, 3, 3});
  EXPECT_TRUE(throws_invalid_argument(
      [&] { conv_transpose(x, w, Tensor(), {}); },
      {"conv_transpose2d: input [1, 3, 4, 4] has 3 channels but weight [2, 4, 3, 3] expects Cin = 2"}));
}

TEST(ConvTranspose, RejectsBiasThatIsNotOnePerOutputChannel) {
  Tensor x = Tensor::zeros({1, 2, 4, 4}), w = Tensor::zeros({2, 4, 3, 3}), b = Tensor::zeros({2});
  EXPECT_TRUE(throws_invalid_argument(
      [&] { conv_transpose(x, w, b, {}); },
      {"conv_transpose2d", "bias (Cout) = (4) expected, got [2]", "[2, 4, 3, 3]"}));
}

TEST(ConvTranspose, RejectsOutputPaddingNotBelowStrideOrDilation) {
  Tensor x = Tensor::zeros({1, 1, 4, 4}), w = Tensor::zeros({1, 1, 3, 3});
  EXPECT_TRUE(throws_invalid_argument(
      [&] { conv_transpose(x, w, Tensor(), {.stride = {2}, .output_padding = {2}}); },
      {"conv_transpose2d", "output_padding [2, 2]", "stride [2, 2]", "dilation [1, 1]", "[1, 1, 4, 4]"}));
}

TEST(ConvTranspose, RejectsWeightOfWrongRank) {
  Tensor x = Tensor::zeros({1, 2, 4, 4, 4}), w = Tensor::zeros({2, 3, 3, 3});
  EXPECT_TRUE(throws_invalid_argument(
      [&] { conv_transpose(x, w, Tensor(), {}); },
      {"conv_transpose3d", "weight (Cin, Cout, kD, kH, kW)", "[2, 3, 3, 3]"}));
}

TEST(ConvTranspose, ConvTranspose3dRejectsFourDimensionalInput) {
  Tensor x = Tensor::zeros({1, 1, 4, 4}), w = Tensor::zeros({1, 1, 2, 2, 2});
  EXPECT_TRUE(throws_invalid_argument(
      [&] { conv_transpose3d(x, w, Tensor()); },
      {"conv_transpose3d: input (N, C, D, H, W) expected, got [1, 1, 4, 4]"}));
}

TEST(ConvTranspose, RejectsPaddingThatLeavesNoOutput) {
  Tensor x = Tensor::zeros({1, 1, 1, 3}), w = Tensor::zeros({1, 1, 1, 1});
  EXPECT_TRUE(throws_invalid_argument([&] { conv_transpose(x, w, Tensor(), {.padding = {1}}); },
                                      {"conv_transpose2d", "along H", "[1, 1, 1, 3]"}));
}

// ---- the module ----

TEST(ConvTransposeModule, WeightIsInputByOutputChannelsWithPyTorchInitBound) {
  // PyTorch takes fan_in from weight.size(1): out_channels * kernel cells = 2 * 9.
  Generator gen(1);
  ConvTranspose up(8, 2, {3, 3}, {.stride = {2}}, gen);
  EXPECT_EQ(up.weight.shape(), (Shape{8, 2, 3, 3}));
  EXPECT_EQ(up.bias.shape(), (Shape{2}));
  const float bound = 1.0f / std::sqrt(18.0f);
  float largest = 0.0f;
  for (float v : up.weight.to_vector()) largest = std::max(largest, std::abs(v));
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, 0.8f * bound);  // not conv's smaller 1/sqrt(8 * 9)
  for (float v : up.bias.to_vector()) EXPECT_LE(std::abs(v), bound);
}

TEST(ConvTransposeModule, DoublesTheSizeOfA3dVolume) {
  Generator gen(1);
  ConvTranspose up(4, 2, {2, 2, 2}, {.stride = {2}}, gen);
  EXPECT_EQ(up(Tensor::zeros({1, 4, 3, 5, 2})).shape(), (Shape{1, 2, 6, 10, 4}));
  EXPECT_EQ(up.named_parameters().size(), 2u);
}

TEST(Conv3dModule, HasACubicKernel) {
  Generator gen(1);
  Conv3d c(2, 3, 3, {.padding = {1}}, gen);
  EXPECT_EQ(c.weight.shape(), (Shape{3, 2, 3, 3, 3}));
  EXPECT_EQ(c(Tensor::zeros({1, 2, 4, 4, 4})).shape(), (Shape{1, 3, 4, 4, 4}));
}

}  // namespace
}  // namespace quartet::engine

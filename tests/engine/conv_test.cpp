#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "engine/autograd.h"
#include "engine/memory.h"
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

// Direct loops over every output, input channel and kernel cell, in double, for up to
// three spatial dims (right-aligned, as the kernels do). Given the output gradient g it
// also returns dx and dw.
struct Reference {
  std::vector<float> y, dx, dw;
};

Reference reference_conv(const Tensor& x, const Tensor& w, const Tensor& b, const ConvOptions& opt,
                         const Tensor& g) {
  const int spatial = x.dim() - 2;
  std::array<int64_t, 3> in{1, 1, 1}, k{1, 1, 1}, s{1, 1, 1}, p{0, 0, 0}, d{1, 1, 1}, o{1, 1, 1};
  for (int i = 0; i < spatial; ++i) {
    const int j = 3 - spatial + i;
    in[j] = x.size(2 + i);
    k[j] = w.size(2 + i);
    s[j] = opt.stride.size() == 1 ? opt.stride[0] : opt.stride[i];
    p[j] = opt.padding.size() == 1 ? opt.padding[0] : opt.padding[i];
    d[j] = opt.dilation.size() == 1 ? opt.dilation[0] : opt.dilation[i];
    o[j] = (in[j] + 2 * p[j] - d[j] * (k[j] - 1) - 1) / s[j] + 1;
  }
  const int64_t n_ = x.size(0), ci_ = x.size(1), co_ = w.size(0);
  const int64_t in_size = in[0] * in[1] * in[2], k_size = k[0] * k[1] * k[2], o_size = o[0] * o[1] * o[2];
  std::vector<double> y(n_ * co_ * o_size), dx(x.numel()), dw(w.numel());
  const float *px = x.data(), *pw = w.data(), *pg = g.data();
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t co = 0; co < co_; ++co)
      for (int64_t ol = 0; ol < o_size; ++ol) {
        const int64_t od = ol / (o[1] * o[2]), oh = ol / o[2] % o[1], ow = ol % o[2];
        const int64_t yi = (n * co_ + co) * o_size + ol;
        y[yi] = b.defined() ? b.data()[co] : 0.0;
        for (int64_t ci = 0; ci < ci_; ++ci)
          for (int64_t kl = 0; kl < k_size; ++kl) {
            const int64_t kd = kl / (k[1] * k[2]), kh = kl / k[2] % k[1], kw = kl % k[2];
            const int64_t id = od * s[0] - p[0] + kd * d[0];
            const int64_t ih = oh * s[1] - p[1] + kh * d[1];
            const int64_t iw = ow * s[2] - p[2] + kw * d[2];
            if (id < 0 || id >= in[0] || ih < 0 || ih >= in[1] || iw < 0 || iw >= in[2]) continue;
            const int64_t xi = (n * ci_ + ci) * in_size + (id * in[1] + ih) * in[2] + iw;
            const int64_t wi = (co * ci_ + ci) * k_size + kl;
            y[yi] += double(pw[wi]) * px[xi];
            dx[xi] += double(pw[wi]) * pg[yi];
            dw[wi] += double(px[xi]) * pg[yi];
          }
      }
  return {std::vector<float>(y.begin(), y.end()), std::vector<float>(dx.begin(), dx.end()),
          std::vector<float>(dw.begin(), dw.end())};
}

// Runs conv forward and backward (seeded with g) and checks all against reference_conv.
void expect_matches_reference(const Shape& x_shape, const Shape& w_shape, const ConvOptions& opt, float tol) {
  Tensor x = param(x_shape, 1), w = param(w_shape, 2), b = param({w_shape[0]}, 3);
  Tensor y = conv(x, w, b, opt);
  Tensor g = random_tensor(y.shape(), 4);
  y.backward(g);
  const Reference ref = reference_conv(x, w, b, opt, g);
  expect_near(y.to_vector(), ref.y, tol);
  expect_near(x.grad().to_vector(), ref.dx, tol);
  expect_near(w.grad().to_vector(), ref.dw, tol);
}

// ---- forward by hand ----

TEST(Conv, Conv2dForwardMatchesHandComputedValues) {
  // x = [[1 2 3] [4 5 6] [7 8 9]], w = [[1 2] [3 4]], bias 0.5.
  Tensor x = Tensor::from_vector({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor w = Tensor::from_vector({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor b = Tensor::from_vector({1}, {0.5f});
  Tensor y = conv2d(x, w, b);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  // 1+4+12+20, 2+6+15+24, 4+10+21+32, 5+12+24+36, each + 0.5
  EXPECT_EQ(y.to_vector(), (std::vector<float>{37.5f, 47.5f, 67.5f, 77.5f}));
}

TEST(Conv, Conv2dWithPaddingAndStrideMatchesHandComputedValues) {
  // A 3x3 box sum at the four corners of a zero-padded 3x3 image.
  Tensor x = Tensor::from_vector({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor w = Tensor::full({1, 1, 3, 3}, 1.0f);
  Tensor y = conv2d(x, w, Tensor(), {.stride = {2}, .padding = {1}});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{12, 16, 24, 28}));
}

TEST(Conv, Conv2dWithDilationMatchesHandComputedValues) {
  // x[r][c] = 4r + c; a 2x2 kernel of ones dilated by 2 sums x[i][j], x[i][j+2], x[i+2][j], x[i+2][j+2].
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i);
  Tensor x = Tensor::from_vector({1, 1, 4, 4}, v);
  Tensor w = Tensor::full({1, 1, 2, 2}, 1.0f);
  Tensor y = conv2d(x, w, Tensor(), {.dilation = {2}});
  EXPECT_EQ(y.to_vector(), (std::vector<float>{20, 24, 36, 40}));
}

TEST(Conv, Conv2dPointwiseMixesChannels) {
  // out0 = in0 + 0.5 in1, out1 = -in0: a 1x1 kernel is a per-pixel matrix product.
  Tensor x = Tensor::from_vector({1, 2, 2, 2}, {1, 2, 3, 4, 10, 20, 30, 40});
  Tensor w = Tensor::from_vector({2, 2, 1, 1}, {1, 0.5f, -1, 0});
  Tensor y = conv2d(x, w, Tensor());
  EXPECT_EQ(y.to_vector(), (std::vector<float>{6, 12, 18, 24, -1, -2, -3, -4}));
}

TEST(Conv, Conv3dForwardMatchesHandComputedValues) {
  // x (D=2, H=2, W=3) = 1..12; a 2x2x2 box of ones sums the two 2x2x2 blocks.
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i + 1);
  Tensor x = Tensor::from_vector({1, 1, 2, 2, 3}, v);
  Tensor w = Tensor::full({1, 1, 2, 2, 2}, 1.0f);
  Tensor b = Tensor::from_vector({1}, {-1});
  Tensor y = conv3d(x, w, b);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 1, 2}));
  // 1+2+4+5+7+8+10+11 - 1, 2+3+5+6+8+9+11+12 - 1
  EXPECT_EQ(y.to_vector(), (std::vector<float>{47, 55}));
}

TEST(Conv, Conv3dPerDimensionOptionsMatchHandComputedValues) {
  // Kernel (2, 1, 1) = [1, 10] over depth with depth padding 1 and width stride 2:
  // out[d][h][w] = x[d-1][h][2w] + 10 x[d][h][2w], zero outside.
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i + 1);  // x (D=2, H=2, W=3)
  Tensor x = Tensor::from_vector({1, 1, 2, 2, 3}, v);
  Tensor w = Tensor::from_vector({1, 1, 2, 1, 1}, {1, 10});
  Tensor y = conv3d(x, w, Tensor(), {.stride = {1, 1, 2}, .padding = {1, 0, 0}});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 3, 2, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{10, 30, 40, 60,      // d = 0: 10 x[0]
                                               71, 93, 104, 126,  // d = 1: x[0] + 10 x[1]
                                               7, 9, 10, 12}));   // d = 2: x[1]
}

TEST(Conv, Conv1dForwardMatchesHandComputedValues) {
  // w = [1 0 -1] with stride 2: x0 - x2, x2 - x4.
  Tensor x = Tensor::from_vector({1, 1, 5}, {1, 4, 9, 16, 25});
  Tensor w = Tensor::from_vector({1, 1, 3}, {1, 0, -1});
  Tensor y = conv(x, w, Tensor(), {.stride = {2}});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{-8, -16}));
}

// ---- against direct loops ----

TEST(Conv, Conv2dWithSamplesSplitAcrossThreadsMatchesDirectLoops) {
  // Enough samples and work (over 2^20 multiply-adds) for the batch to go to threads.
  ThreadsScope threads(2);
  expect_matches_reference({8, 8, 21, 20}, {8, 8, 3, 3}, {.padding = {1}}, 1e-3f);
}

TEST(Conv, Conv2dOnOneSampleMatchesDirectLoops) {
  expect_matches_reference({1, 3, 9, 8}, {4, 3, 3, 3}, {.stride = {1, 2}, .padding = {0, 1}}, 1e-4f);
}

TEST(Conv, Conv2dLargeOutputProcessedInChunksMatchesDirectLoops) {
  // 576 x 4096 patches exceed one im2col buffer (2^20 floats): chunks of 28 rows of 64,
  // one after another on one thread.
  ThreadsScope threads(1);
  expect_matches_reference({1, 64, 64, 64}, {2, 64, 3, 3}, {.padding = {1}}, 2e-3f);
}

TEST(Conv, Conv3dLargeOutputProcessedInChunksMatchesDirectLoops) {
  // Chunks of output rows cross depth slices here (75 rows of 32, 640 rows in all).
  ThreadsScope threads(1);
  expect_matches_reference({1, 16, 20, 32, 32}, {2, 16, 3, 3, 3}, {.padding = {1}}, 2e-3f);
}

// One sample, two threads: the output rows' chunks are spread over the threads, weight
// gradients summed per thread. With Cout <= Cin dx is a forward conv, chunked the same
// way; with Cout > Cin col2im's chunks overlap and dx takes a second, serial pass.
TEST(Conv, Conv3dOneSampleChunksSplitAcrossThreadsMatchesDirectLoops) {
  ThreadsScope threads(2);
  expect_matches_reference({1, 16, 20, 32, 32}, {2, 16, 3, 3, 3}, {.padding = {1}}, 2e-3f);
}

TEST(Conv, Conv3dOneSampleChunksSplitAcrossThreadsWithCol2imMatchesDirectLoops) {
  ThreadsScope threads(2);
  expect_matches_reference({1, 4, 20, 32, 32}, {16, 4, 3, 3, 3}, {.padding = {1}}, 2e-3f);
}

// Stride equal to the kernel (unet3d's up-convolutions are the transposed kind): no two
// output positions share an input cell, so col2im's chunks of one sample go to the
// threads too (four chunks of 256 output rows here).
TEST(Conv, Conv3dDisjointWindowsOneSampleCol2imChunksSplitAcrossThreadsMatchesDirectLoops) {
  ThreadsScope threads(2);
  expect_matches_reference({1, 16, 64, 64, 64}, {8, 16, 2, 2, 2}, {.stride = {2}}, 1e-3f);
}

TEST(Conv, ConvBackwardWithChunksSplitAcrossThreadsIsBitwiseRepeatable) {
  ThreadsScope threads(2);
  auto run = [] {
    Tensor x = param({1, 4, 20, 32, 32}, 1), w = param({16, 4, 3, 3, 3}, 2);
    Tensor y = conv3d(x, w, Tensor(), {.padding = {1}});
    y.backward(random_tensor(y.shape(), 4));
    return std::array<std::vector<float>, 2>{x.grad().to_vector(), w.grad().to_vector()};
  };
  EXPECT_EQ(run(), run());
}

// Stride 1 along every axis: the 3D conv goes by depth slices (engine/cpu/conv.cpp),
// each input slice's im2col feeding the output slices around it. Depth padding from 0
// to past the kernel (output slices that read only padding), two samples on two threads
// and one sample whose slices the two threads split.
TEST(Conv, Conv3dByDepthSlicesMatchesDirectLoops) {
  ThreadsScope threads(2);
  // Cin·kh·kw >= 64, the least for which the slices are used.
  expect_matches_reference({2, 8, 6, 5, 7}, {4, 8, 3, 3, 3}, {.padding = {0, 1, 1}}, 1e-4f);
  expect_matches_reference({2, 8, 6, 5, 7}, {4, 8, 3, 3, 3}, {.padding = {2, 1, 0}}, 1e-4f);
  expect_matches_reference({1, 8, 5, 4, 4}, {2, 8, 2, 3, 3}, {.padding = {3, 1, 1}}, 1e-4f);
  expect_matches_reference({1, 8, 9, 6, 6}, {5, 8, 3, 3, 3}, {.padding = {1}}, 1e-4f);
  expect_matches_reference({2, 8, 12, 16, 16}, {8, 8, 3, 3, 3}, {.padding = {1}}, 1e-3f);  // by samples
  expect_matches_reference({1, 8, 12, 16, 16}, {8, 8, 3, 3, 3}, {.padding = {1}}, 1e-3f);  // by slices
  // A slice's im2col (576 x 4096 floats) past the 2^20-float budget: three pieces a slice.
  expect_matches_reference({1, 64, 3, 64, 64}, {2, 64, 3, 3, 3}, {.padding = {1}}, 2e-3f);
}

TEST(Conv, Conv3dByDepthSlicesGradientsMatchFiniteDifferences) {
  const ConvOptions opt{.padding = {2, 0, 1}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv3d(in[0], in[1], in[2], opt); },
                        {param({2, 8, 4, 3, 3}, 1), param({3, 8, 3, 3, 3}, 2), param({3}, 3)}));
}

// One input channel with a 3x3, 5x5 or 3x3x3 kernel, stride 1: the direct kernels
// (engine/cpu/conv.cpp), eight output channels at a time along rows of 16 floats. Output
// channels that are not a multiple of eight, rows shorter than, equal to and past 16
// with a remainder, padding from none to past the kernel, with and without bias; two
// threads (rows of the output, whole channels of the weight gradient).
TEST(Conv, ConvWithOneInputChannelMatchesDirectLoops) {
  ThreadsScope threads(2);
  expect_matches_reference({3, 1, 28, 28}, {6, 1, 5, 5}, {.padding = {2}}, 1e-4f);   // lenet5's conv1
  expect_matches_reference({2, 1, 28, 28}, {32, 1, 3, 3}, {.padding = {1}}, 1e-4f);  // cnn's conv1
  expect_matches_reference({2, 1, 9, 13}, {11, 1, 3, 3}, {.padding = {0}}, 1e-4f);
  expect_matches_reference({1, 1, 7, 37}, {3, 1, 5, 5}, {.padding = {0, 5}}, 1e-4f);
  expect_matches_reference({2, 1, 5, 6, 19}, {16, 1, 3, 3, 3}, {.padding = {1}}, 1e-4f);
  expect_matches_reference({1, 1, 4, 5, 16}, {9, 1, 3, 3, 3}, {.padding = {2, 0, 1}}, 1e-4f);
  // Enough work for the threads to take part (over 2^20 multiply-adds).
  expect_matches_reference({1, 1, 8, 16, 40}, {16, 1, 3, 3, 3}, {.padding = {1}}, 1e-3f);
}

TEST(Conv, ConvWithOneInputChannelWithoutBiasMatchesFiniteDifferences) {
  const ConvOptions opt{.padding = {1}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv2d(in[0], in[1], Tensor(), opt); },
                        {param({2, 1, 5, 18}, 1), param({3, 1, 3, 3}, 2)}));
}

// Each output, and each output channel's weight gradient, is summed by one thread in a
// fixed order: the same bits whatever the thread count.
TEST(Conv, ConvWithOneInputChannelGivesTheSameBitsOnAnyThreadCount) {
  auto run = [](int n) {
    ThreadsScope threads(n);
    Tensor x = random_tensor({2, 1, 16, 24, 40}, 1), w = param({16, 1, 3, 3, 3}, 2), b = param({16}, 3);
    Tensor y = conv3d(x, w, b, {.padding = {1}});
    y.backward(random_tensor(y.shape(), 4));
    return std::array<std::vector<float>, 2>{y.to_vector(), w.grad().to_vector()};
  };
  EXPECT_EQ(run(1), run(2));
  EXPECT_EQ(run(1), run(3));
}

TEST(Conv, Conv3dStridedAndDilatedMatchesDirectLoops) {
  expect_matches_reference({3, 2, 7, 6, 9}, {3, 2, 2, 3, 2}, {.stride = {2, 1, 3}, .padding = {1, 2, 0},
                                                             .dilation = {2, 1, 2}},
                           1e-4f);
}

TEST(Conv, ConvBackwardIsBitwiseRepeatable) {
  ThreadsScope threads(3);  // weight-gradient partials from three threads, 3 + 3 + 2 samples
  auto run = [] {
    Tensor x = param({8, 8, 16, 16}, 1), w = param({8, 8, 3, 3}, 2), b = param({8}, 3);
    Tensor y = conv2d(x, w, b, {.padding = {1}});
    y.backward(random_tensor(y.shape(), 4));
    return std::array<std::vector<float>, 3>{x.grad().to_vector(), w.grad().to_vector(),
                                             b.grad().to_vector()};
  };
  EXPECT_EQ(run(), run());
}

TEST(Conv, Conv2dReturnsIm2colWorkspaceWhenDone) {
  Tensor x = random_tensor({2, 3, 8, 8}, 1), w = random_tensor({4, 3, 3, 3}, 2);
  const int64_t before = memory_stats().current[static_cast<int>(MemTag::workspace)];
  reset_memory_peaks();
  conv2d(x, w, Tensor());
  const MemStats after = memory_stats();
  EXPECT_GT(after.peak[static_cast<int>(MemTag::workspace)], before);
  EXPECT_EQ(after.current[static_cast<int>(MemTag::workspace)], before);
}

// ---- gradients by finite differences ----

TEST(Conv, Conv1dGradientsMatchFiniteDifferences) {
  const ConvOptions opt{.stride = {2}, .padding = {2}, .dilation = {2}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv(in[0], in[1], in[2], opt); },
                        {param({2, 3, 11}, 1), param({2, 3, 3}, 2), param({2}, 3)}));
}

TEST(Conv, Conv2dGradientsMatchFiniteDifferences) {
  const ConvOptions opt{.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv2d(in[0], in[1], in[2], opt); },
                        {param({2, 3, 7, 5}, 1), param({4, 3, 3, 2}, 2), param({4}, 3)}));
}

TEST(Conv, Conv2dWithoutBiasGradientsMatchFiniteDifferences) {
  const ConvOptions opt{.padding = {1}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv2d(in[0], in[1], Tensor(), opt); },
                        {param({3, 2, 5, 6}, 1), param({3, 2, 3, 3}, 2)}));
}

TEST(Conv, Conv2dPointwiseGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv2d(in[0], in[1], in[2]); },
                        {param({2, 3, 3, 5}, 1), param({4, 3, 1, 1}, 2), param({4}, 3)}));
}

TEST(Conv, Conv2dInputGradientAloneMatchesFiniteDifferences) {
  Tensor w = random_tensor({3, 2, 3, 3}, 2);  // frozen weight: only dx is computed
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv2d(in[0], w, Tensor(), {.stride = {2}}); },
                        {param({2, 2, 7, 7}, 1)}));
}

TEST(Conv, Conv3dGradientsMatchFiniteDifferences) {
  const ConvOptions opt{.stride = {2, 1, 1}, .padding = {1, 1, 0}, .dilation = {1, 1, 2}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv3d(in[0], in[1], in[2], opt); },
                        {param({2, 2, 5, 4, 5}, 1), param({3, 2, 3, 2, 2}, 2), param({3}, 3)}));
}

TEST(Conv, Conv3dWithoutBiasGradientsMatchFiniteDifferences) {
  const ConvOptions opt{.stride = {2}, .padding = {1}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv3d(in[0], in[1], Tensor(), opt); },
                        {param({2, 2, 5, 5, 3}, 1), param({2, 2, 3, 3, 3}, 2)}));
}

// ---- bad input ----

// With stride 1, no dilation and no more output than input channels, the input gradient
// is computed as a forward conv of the output gradient with the flipped kernel
// (engine/cpu/conv.cpp); these shapes take that path, the ones above the other.
TEST(Conv, Conv2dInputGradientByFlippedKernelMatchesFiniteDifferences) {
  const ConvOptions opt{.padding = {1, 0}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv2d(in[0], in[1], in[2], opt); },
                        {param({2, 4, 6, 5}, 1), param({3, 4, 3, 2}, 2), param({3}, 3)}));
}

TEST(Conv, Conv3dInputGradientByFlippedKernelMatchesFiniteDifferences) {
  const ConvOptions opt{.padding = {1, 0, 2}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv3d(in[0], in[1], Tensor(), opt); },
                        {param({2, 3, 4, 5, 4}, 1), param({3, 3, 3, 2, 3}, 2)}));
}

TEST(Conv, Conv2dRejectsInputOfWrongRank) {
  Tensor x = Tensor::zeros({3, 4}), w = Tensor::zeros({1, 1, 3, 3});
  EXPECT_TRUE(throws_invalid_argument([&] { conv2d(x, w, Tensor()); },
                                      {"conv2d: input (N, C, H, W) expected, got [3, 4]"}));
}

TEST(Conv, Conv3dRejectsFourDimensionalInput) {
  Tensor x = Tensor::zeros({1, 1, 4, 4}), w = Tensor::zeros({1, 1, 3, 3, 3});
  EXPECT_TRUE(throws_invalid_argument([&] { conv3d(x, w, Tensor()); },
                                      {"conv3d", "(N, C, D, H, W)", "[1, 1, 4, 4]"}));
}

TEST(Conv, ConvRejectsInputWithoutSpatialDims) {
  Tensor x = Tensor::zeros({2, 3}), w = Tensor::zeros({1, 3});
  EXPECT_TRUE(throws_invalid_argument([&] { conv(x, w, Tensor(), {}); }, {"conv:", "[2, 3]"}));
}

TEST(Conv, ConvRejectsWeightOfWrongRank) {
  Tensor x = Tensor::zeros({1, 2, 5, 5}), w = Tensor::zeros({4, 2, 3});
  EXPECT_TRUE(throws_invalid_argument([&] { conv2d(x, w, Tensor()); },
                                      {"conv2d", "weight (Cout, Cin, kH, kW)", "[4, 2, 3]", "[1, 2, 5, 5]"}));
}

TEST(Conv, ConvRejectsChannelMismatch) {
  Tensor x = Tensor::zeros({2, 3, 5, 5}), w = Tensor::zeros({4, 2, 3, 3});
  EXPECT_TRUE(throws_invalid_argument([&] { conv2d(x, w, Tensor()); },
                                      {"conv2d", "[2, 3, 5, 5]", "[4, 2, 3, 3]", "Cin"}));
}

TEST(Conv, ConvRejectsBiasOfWrongShape) {
  Tensor x = Tensor::zeros({1, 3, 5, 5}), w = Tensor::zeros({4, 3, 3, 3}), b = Tensor::zeros({3});
  EXPECT_TRUE(throws_invalid_argument([&] { conv2d(x, w, b); }, {"conv2d", "bias", "[3]", "[4, 3, 3, 3]"}));
}

TEST(Conv, ConvRejectsZeroStride) {
  Tensor x = Tensor::zeros({1, 1, 5, 5}), w = Tensor::zeros({1, 1, 3, 3});
  EXPECT_TRUE(throws_invalid_argument([&] { conv2d(x, w, Tensor(), {.stride = {1, 0}}); },
                                      {"conv2d", "stride", "[1, 0]", "[1, 1, 5, 5]"}));
}

TEST(Conv, ConvRejectsNegativePadding) {
  Tensor x = Tensor::zeros({1, 1, 5, 5}), w = Tensor::zeros({1, 1, 3, 3});
  EXPECT_TRUE(throws_invalid_argument([&] { conv2d(x, w, Tensor(), {.padding = {-1}}); },
                                      {"conv2d", "padding", "[-1]", "[1, 1, 5, 5]"}));
}

TEST(Conv, ConvRejectsZeroDilation) {
  Tensor x = Tensor::zeros({1, 1, 5, 5}), w = Tensor::zeros({1, 1, 3, 3});
  EXPECT_TRUE(throws_invalid_argument([&] { conv2d(x, w, Tensor(), {.dilation = {0}}); },
                                      {"conv2d", "dilation", "[0]", "[1, 1, 3, 3]"}));
}

TEST(Conv, ConvRejectsOptionWithWrongNumberOfValues) {
  Tensor x = Tensor::zeros({1, 1, 5, 5}), w = Tensor::zeros({1, 1, 3, 3});
  EXPECT_TRUE(throws_invalid_argument([&] { conv2d(x, w, Tensor(), {.stride = {1, 1, 1}}); },
                                      {"conv2d", "stride expects 1 or 2 values, got 3", "[1, 1, 5, 5]"}));
}

TEST(Conv, ConvRejectsKernelLargerThanPaddedInput) {
  Tensor x = Tensor::zeros({1, 1, 2, 6}), w = Tensor::zeros({1, 1, 3, 3});
  EXPECT_TRUE(throws_invalid_argument([&] { conv2d(x, w, Tensor()); },
                                      {"conv2d", "along H", "[1, 1, 2, 6]", "[1, 1, 3, 3]"}));
}

TEST(Conv, ConvRejectsWeightWithZeroSize) {
  Tensor x = Tensor::zeros({1, 1, 5, 5}), w = Tensor::zeros({0, 1, 3, 3});
  EXPECT_TRUE(throws_invalid_argument([&] { conv2d(x, w, Tensor()); }, {"conv2d", "[0, 1, 3, 3]"}));
}

}  // namespace
}  // namespace quartet::engine

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/cpu/conv.h"
#include "engine/cpu/conv_kernel.h"
#include "engine/cpu/winograd.h"
#include "engine/ops.h"
#include "engine/threads.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::gradcheck;
using testing::param;
using testing::random_tensor;
using testing::ThreadsScope;
using testing::throws_invalid_argument;

// Sets QUARTET_CONV_KERNEL for one test (unset when value is null), restoring it after.
class KernelScope {
 public:
  explicit KernelScope(const char* value) {
    if (const char* old = std::getenv(kName)) saved_ = old;
    if (value) setenv(kName, value, 1);
    else unsetenv(kName);
  }
  ~KernelScope() {
    if (saved_) setenv(kName, saved_->c_str(), 1);
    else unsetenv(kName);
  }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  static constexpr const char* kName = "QUARTET_CONV_KERNEL";
  std::optional<std::string> saved_;
};

// Winograd's transforms reorder and rescale the sums, so it agrees with im2col to within
// rounding that grows with the terms summed: max |a - b| <= 1e-6 * max |b| * sqrt(K),
// K = Cin * 27 (3D) or Cin * 9 (2D). The cases below reach at most 7.4e-8 of that scale.
void expect_close(const Tensor& actual, const Tensor& expected, int64_t terms) {
  const std::vector<float> a = actual.to_vector(), b = expected.to_vector();
  ASSERT_EQ(a.size(), b.size());
  float scale = 0.0f, worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::abs(b[i]));
    worst = std::max(worst, std::abs(a[i] - b[i]));
  }
  EXPECT_LE(worst, 1e-6f * scale * std::sqrt(static_cast<float>(terms))) << "scale " << scale;
}

ConvOptions options(int dims, int64_t pad) {
  return {.stride = std::vector<int64_t>(dims, 1), .padding = std::vector<int64_t>(dims, pad),
          .dilation = std::vector<int64_t>(dims, 1)};
}

Shape with_spatial(Shape s, const Shape& spatial) {
  s.insert(s.end(), spatial.begin(), spatial.end());
  return s;
}

// Forward (with and without bias) and input gradient of one conv, Winograd against im2col.
void expect_matches_im2col(const Shape& spatial, int64_t n, int64_t cin, int64_t cout, int64_t pad) {
  const int dims = static_cast<int>(spatial.size());
  const ConvOptions opt = options(dims, pad);
  const Tensor x = random_tensor(with_spatial({n, cin}, spatial), 1);
  const Tensor w = random_tensor(with_spatial({cout, cin}, Shape(dims, 3)), 2), b = random_tensor({cout}, 3);
  Shape out_spatial;
  for (int64_t s : spatial) out_spatial.push_back(s + 2 * pad - 2);
  const Tensor dy = random_tensor(with_spatial({n, cout}, out_spatial), 4);
  const int64_t terms = cin * (dims == 3 ? 27 : 9);
  SCOPED_TRACE("x " + shape_str(x.shape()) + " w " + shape_str(w.shape()) + " pad " + std::to_string(pad));
  KernelScope im2col("im2col");
  for (const Tensor& bias : {b, Tensor()}) {
    Tensor expected = Tensor::empty(dy.shape()), actual = Tensor::empty(dy.shape());
    cpu::conv_forward(x, w, bias, opt, expected);
    cpu::winograd_conv_forward(x, w, bias, opt, actual);
    expect_close(actual, expected, terms);
  }
  Tensor expected = Tensor::empty(x.shape()), actual = Tensor::empty(x.shape()), none;
  cpu::conv_backward(x, w, dy, opt, expected, none, none);
  cpu::winograd_conv_backward_data(w, dy, opt, actual);
  expect_close(actual, expected, cout * (dims == 3 ? 27 : 9));
}

// Odd sizes leave partial output tiles at the edges; one and three samples, channel
// counts 1, 3 and 17, padding 0 and 1, one and two threads.
void expect_matches_im2col_over_shapes(const Shape& spatial) {
  for (int threads : {1, 2}) {
    ThreadsScope scope(threads);
    for (int64_t pad : {0, 1})
      for (int64_t n : {1, 3})
        for (int64_t cin : {1, 3, 17})
          for (int64_t cout : {1, 3, 17}) expect_matches_im2col(spatial, n, cin, cout, pad);
  }
}

TEST(Winograd, Conv2dMatchesIm2col) { expect_matches_im2col_over_shapes({5, 7}); }

TEST(Winograd, Conv3dMatchesIm2col) { expect_matches_im2col_over_shapes({3, 5, 7}); }

// Padding 2 (input gradient padding 0) and sizes whose tiles span several batches.
TEST(Winograd, LargerConvsInSeveralBatchesMatchIm2col) {
  ThreadsScope threads(2);
  expect_matches_im2col({20, 22}, 4, 32, 16, 1);
  expect_matches_im2col({9, 6}, 2, 5, 4, 2);
  expect_matches_im2col({12, 14, 15}, 1, 16, 24, 1);
  expect_matches_im2col({7, 8, 9}, 2, 4, 6, 2);
}

// Every output tile is computed by one thread in a fixed order.
TEST(Winograd, GivesTheSameBitsOnAnyThreadCount) {
  const Tensor x = random_tensor({2, 16, 12, 14, 15}, 1), w = random_tensor({24, 16, 3, 3, 3}, 2);
  const Tensor b = random_tensor({24}, 3), dy = random_tensor({2, 24, 12, 14, 15}, 4);
  auto run = [&](int n) {
    ThreadsScope threads(n);
    Tensor y = Tensor::empty(dy.shape()), dx = Tensor::empty(x.shape());
    cpu::winograd_conv_forward(x, w, b, options(3, 1), y);
    cpu::winograd_conv_backward_data(w, dy, options(3, 1), dx);
    return std::array<std::vector<float>, 2>{y.to_vector(), dx.to_vector()};
  };
  EXPECT_EQ(run(1), run(2));
  EXPECT_EQ(run(1), run(3));
}

// Training through ops::conv: Winograd forced gives im2col's output and gradients (the
// weight gradient is im2col's in both).
TEST(Winograd, ConvThroughAutogradMatchesIm2col) {
  for (const Shape& spatial : {Shape{9, 11}, Shape{5, 6, 7}}) {
    const int dims = static_cast<int>(spatial.size());
    auto run = [&](const char* kernel) {
      KernelScope scope(kernel);
      Tensor x = param(with_spatial({2, 6}, spatial), 1), w = param(with_spatial({5, 6}, Shape(dims, 3)), 2);
      Tensor b = param({5}, 3);
      Tensor y = conv(x, w, b, {.padding = {1}});
      y.backward(random_tensor(y.shape(), 4));
      return std::array<Tensor, 4>{y.detach(), x.grad(), w.grad(), b.grad()};
    };
    const std::array<Tensor, 4> wino = run("winograd"), ref = run("im2col");
    const int64_t terms = 6 * (dims == 3 ? 27 : 9);
    expect_close(wino[0], ref[0], terms);
    expect_close(wino[1], ref[1], 5 * (dims == 3 ? 27 : 9));
    EXPECT_EQ(wino[2].to_vector(), ref[2].to_vector());
    EXPECT_EQ(wino[3].to_vector(), ref[3].to_vector());
  }
}

TEST(Winograd, ConvGradientsMatchFiniteDifferences) {
  KernelScope scope("winograd");
  const ConvOptions opt{.padding = {1}};
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv2d(in[0], in[1], in[2], opt); },
                        {param({2, 3, 5, 6}, 1), param({4, 3, 3, 3}, 2), param({4}, 3)}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return conv3d(in[0], in[1], Tensor(), opt); },
                        {param({1, 2, 3, 4, 5}, 1), param({3, 2, 3, 3, 3}, 2)}));
}

// ---- choosing the kernel ----

// The fixed rule: 3x3(x3), stride 1, and at least 32 (2D) or 16 (3D) channels in and out.

TEST(Winograd, KernelChoiceFollowsTheShapeRules) {
  KernelScope scope("rule");
  const Tensor x2 = Tensor::empty({1, 32, 8, 8}), x3 = Tensor::empty({1, 16, 8, 8, 8});
  const ConvOptions pad1 = options(2, 1);
  EXPECT_EQ(cpu::conv_kernel_for(x3, Tensor::empty({32, 16, 3, 3, 3}), options(3, 1)), cpu::ConvKernel::winograd);
  EXPECT_EQ(cpu::conv_kernel_for(x3, Tensor::empty({8, 16, 3, 3, 3}), options(3, 1)), cpu::ConvKernel::im2col);
  EXPECT_EQ(cpu::conv_kernel_for(x2, Tensor::empty({64, 32, 3, 3}), pad1), cpu::ConvKernel::winograd);
  EXPECT_EQ(cpu::conv_kernel_for(Tensor::empty({1, 16, 8, 8}), Tensor::empty({16, 16, 3, 3}), pad1),
            cpu::ConvKernel::im2col);
  EXPECT_EQ(cpu::conv_kernel_for(x2, Tensor::empty({64, 32, 5, 5}), pad1), cpu::ConvKernel::im2col);
  EXPECT_EQ(cpu::conv_kernel_for(x2, Tensor::empty({64, 32, 3, 3}), {.stride = {2, 2}, .padding = {1, 1},
                                                                     .dilation = {1, 1}}),
            cpu::ConvKernel::im2col);
  EXPECT_EQ(cpu::conv_kernel_for(Tensor::empty({1, 1, 8, 8}), Tensor::empty({32, 1, 3, 3}), pad1),
            cpu::ConvKernel::im2col);
  EXPECT_STREQ(cpu::conv_kernel_name(cpu::ConvKernel::winograd), "winograd");
}

TEST(Winograd, ForcedKernelOverridesTheRulesWhereWinogradCanRun) {
  const Tensor x = Tensor::empty({1, 1, 8, 8}), w = Tensor::empty({32, 1, 3, 3});
  const ConvOptions pad1 = options(2, 1), stride2{.stride = {2, 2}, .padding = {1, 1}, .dilation = {1, 1}};
  {
    KernelScope scope("winograd");
    EXPECT_EQ(cpu::conv_kernel_for(x, w, pad1), cpu::ConvKernel::winograd);
    EXPECT_EQ(cpu::conv_kernel_for(x, w, stride2), cpu::ConvKernel::im2col);
  }
  KernelScope scope("im2col");
  EXPECT_EQ(cpu::conv_kernel_for(Tensor::empty({1, 16, 8, 8, 8}), Tensor::empty({32, 16, 3, 3, 3}), options(3, 1)),
            cpu::ConvKernel::im2col);
}

// cuDNN's benchmark mode: the first conv of a shape times every kernel that can run it
// (forward and backward), and the shape keeps the fastest; its output is the chosen
// kernel's, bit for bit.
TEST(ConvKernelChoice, MeasureTimesEachCandidateOnceAShapeAndKeepsTheFastest) {
  const Tensor x = random_tensor({2, 16, 6, 7, 5}, 1), w = random_tensor({16, 16, 3, 3, 3}, 2);
  const Tensor b = random_tensor({16}, 3);
  const ConvOptions opt = options(3, 1);
  Tensor measured = Tensor::empty({2, 16, 6, 7, 5});
  std::vector<cpu::KernelChoice> log;
  {
    KernelScope scope("measure");
    cpu::conv_forward(x, w, b, opt, measured);
    cpu::conv_forward(x, w, b, opt, measured);  // the same shape again: no second measurement
    log = cpu::conv_kernel_choices();
  }
  const auto entry = std::find_if(log.begin(), log.end(), [](const cpu::KernelChoice& m) {
    return m.shape.find("x (2, 16, 6, 7, 5) w (16, 16, 3, 3, 3) stride 1x1x1 pad 1x1x1") == 0;
  });
  ASSERT_NE(entry, log.end());
  EXPECT_EQ(std::count_if(log.begin(), log.end(), [&](const cpu::KernelChoice& m) { return m.shape == entry->shape; }),
            1);
  EXPECT_EQ(entry->source, "measured here");
  ASSERT_GE(entry->seconds.size(), 2u);  // Winograd (the rule's, first) and im2col at least
  EXPECT_EQ(entry->seconds[0].first, "winograd");
  EXPECT_EQ(entry->seconds[1].first, "im2col");
  const auto fastest = std::min_element(entry->seconds.begin(), entry->seconds.end(),
                                        [](const auto& a, const auto& c) { return a.second < c.second; });
  EXPECT_EQ(entry->kernel, fastest->first);

  Tensor forced = Tensor::empty({2, 16, 6, 7, 5});
  KernelScope scope(entry->kernel.c_str());
  cpu::conv_forward(x, w, b, opt, forced);
  EXPECT_EQ(measured.to_vector(), forced.to_vector());
}

TEST(Winograd, BadKernelNameIsRejectedNamingTheVariable) {
  KernelScope scope("fft");
  EXPECT_TRUE(throws_invalid_argument(
      [] { cpu::conv_kernel_for(Tensor::empty({1, 1, 8, 8}), Tensor::empty({1, 1, 3, 3}), options(2, 1)); },
      {"QUARTET_CONV_KERNEL", "auto, rule, measure, im2col, winograd or onednn", "fft"}));
}

}  // namespace
}  // namespace quartet::engine

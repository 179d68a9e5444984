// The CUDA pooling kernels against the CPU's: max pooling bit for bit (values, the
// first winner of ties, NaN winning, the gradient at the winner), average pooling with
// padding counted as zeros, and global average pooling, over 1-D to 3-D windows that
// overlap, leave gaps or reach into the padding.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "tests/engine/cuda/op_check.h"

namespace quartet::engine::cuda_test {
namespace {

using Inputs = std::vector<Tensor>;

struct PoolCase {
  Shape x;
  PoolOptions opt;
};

std::string describe(const char* op, const PoolCase& c) {
  return std::string(op) + " x " + shape_str(c.x) + " kernel " + shape_str(c.opt.kernel) + " stride " +
         shape_str(c.opt.stride) + " padding " + shape_str(c.opt.padding);
}

std::vector<PoolCase> cases() {
  return {
      {{2, 3, 19}, {.kernel = {3}, .stride = {2}, .padding = {1}}},                  // 1-D
      {{2, 4, 16, 16}, {.kernel = {2}}},                                             // 2x2, stride = kernel
      {{1, 3, 15, 13}, {.kernel = {2}}},                                             // odd sizes
      {{2, 2, 11, 12}, {.kernel = {3}, .stride = {1}, .padding = {1}}},              // overlapping
      {{1, 2, 13, 14}, {.kernel = {3, 2}, .stride = {2, 3}, .padding = {1, 1}}},     // gaps along W
      {{2, 2, 9, 10, 11}, {.kernel = {2, 3, 2}, .stride = {2, 1, 3}, .padding = {1, 1, 0}}},  // 3-D, mixed
      {{2, 8, 16, 16, 16}, {.kernel = {2}}},                                         // unet3d's pool
      {{1, 1, 5, 5}, {.kernel = {5}, .stride = {1}, .padding = {2}}},                // 25 windows per cell
  };
}

// Few distinct values, so windows tie often; NaNs and infinities sprinkled in.
Tensor tie_heavy(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) {
    const uint64_t r = gen.below(50);
    if (r == 0) x = std::numeric_limits<float>::quiet_NaN();
    else if (r == 1) x = -std::numeric_limits<float>::infinity();
    else if (r == 2) x = std::numeric_limits<float>::infinity();
    else x = static_cast<float>(static_cast<int64_t>(r % 4) - 2);
  }
  return Tensor::from_vector(shape, v);
}

void expect_same_bits(const Tensor& host, const Tensor& device, const std::string& what) {
  const std::vector<float> a = host.to_vector(), b = device.to_vector();
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = std::bit_cast<uint32_t>(a[i]) == std::bit_cast<uint32_t>(b[i]) ||
                      (std::isnan(a[i]) && std::isnan(b[i])) || (a[i] == 0.0f && b[i] == 0.0f);
    ASSERT_TRUE(same) << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST(CudaPool, MaxPoolMatchesCpuExactly) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 1;
  for (const PoolCase& c : cases()) {
    const PoolOptions opt = c.opt;
    expect_same_on_gpu(describe("max_pool", c), {random_tensor(c.x, seed++)},
                       [opt](const Inputs& v) { return max_pool(v[0], opt); }, 0.0);
  }
}

// Ties go to the first cell in window order, the first NaN wins, and the gradient goes
// to that winner alone: the same bits as the CPU, forward and backward.
TEST(CudaPool, MaxPoolTiesAndNansMatchCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 50;
  for (const PoolCase& c : cases()) {
    const Tensor x = tie_heavy(c.x, seed++);
    Tensor xh = x.clone().set_requires_grad(true), xd = x.to(kGpu).set_requires_grad(true);
    const Tensor yh = max_pool(xh, c.opt), yd = max_pool(xd, c.opt);
    expect_same_bits(yh, yd, describe("max_pool forward", c));
    const Tensor g = random_tensor(yh.shape(), seed++);
    yh.backward(g);
    yd.backward(g.to(kGpu));
    expect_same_bits(xh.grad(), xd.grad(), describe("max_pool grad", c));
  }
}

// Forward sums in the CPU's order; backward may differ by a fused multiply-add.
TEST(CudaPool, AvgPoolMatchesCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 100;
  for (const PoolCase& c : cases()) {
    const PoolOptions opt = c.opt;
    expect_same_on_gpu(describe("avg_pool", c), {random_tensor(c.x, seed++)},
                       [opt](const Inputs& v) { return avg_pool(v[0], opt); }, 1e-6);
  }
}

TEST(CudaPool, GlobalAvgPoolMatchesCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 150;
  for (const Shape& s : {Shape{2, 3, 5}, Shape{4, 6, 7, 9}, Shape{2, 16, 24, 24, 24}, Shape{1, 2, 300, 300}}) {
    expect_same_on_gpu("global_avg_pool " + shape_str(s), {random_tensor(s, seed++)},
                       [](const Inputs& v) { return global_avg_pool(v[0]); }, 1e-6);
  }
}

// Inference: no input requires grad, so no argmax is kept; the values are the same.
TEST(CudaPool, MaxPoolWithoutArgmax) {
  QUARTET_NEED_GPU(1);
  const PoolCase c = cases()[3];
  const Tensor x = random_tensor(c.x, 200);
  NoGradScope no_grad;
  expect_same_bits(max_pool(x, c.opt), max_pool(x.to(kGpu), c.opt), describe("max_pool no grad", c));
}

}  // namespace
}  // namespace quartet::engine::cuda_test

// The pooling index arithmetic of the CUDA kernels (engine/cuda/pool_index.h), run on
// the host against the CPU kernels: every output's window (max with its winner, mean)
// and every input cell's gathered gradient, for 1-D to 3-D pools with overlapping and
// gapped windows, padding, ties, NaNs and infinities.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "engine/cpu/pool.h"
#include "engine/cuda/pool_index.h"
#include "engine/ops.h"
#include "engine/random.h"

namespace quartet::engine {
namespace {

using cuda::PoolGeometry;

struct PoolCase {
  Shape in;
  std::vector<int64_t> kernel, stride, padding;
};

std::string describe(const PoolCase& c) {
  return "in " + shape_str(c.in) + " kernel " + shape_str(c.kernel) + " stride " + shape_str(c.stride) +
         " padding " + shape_str(c.padding);
}

// Few distinct values, so windows tie often; a NaN, -inf and +inf sprinkled in.
Tensor tie_heavy(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) {
    const uint64_t r = gen.below(40);
    if (r == 0) x = std::numeric_limits<float>::quiet_NaN();
    else if (r == 1) x = -std::numeric_limits<float>::infinity();
    else if (r == 2) x = std::numeric_limits<float>::infinity();
    else x = static_cast<float>(static_cast<int64_t>(r % 5) - 2);
  }
  return Tensor::from_vector(shape, v);
}

Tensor uniform(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape);
  uniform_(t, -1.0f, 1.0f, gen);
  return t;
}

bool same(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

std::vector<PoolCase> cases() {
  return {
      {{2, 3, 9}, {3}, {2}, {1}},                       // 1-D, overlapping, padded
      {{1, 2, 8, 8}, {2, 2}, {2, 2}, {0, 0}},           // the CPU's 2x2 fast path
      {{1, 2, 7, 9}, {2, 2}, {2, 2}, {0, 0}},           // 2x2 over odd sizes (a cell left over)
      {{2, 2, 7, 6}, {3, 3}, {1, 1}, {1, 1}},           // stride 1: up to 9 windows per cell
      {{1, 3, 10, 11}, {3, 2}, {2, 3}, {1, 1}},         // gaps between windows along W
      {{1, 1, 5, 6}, {4, 4}, {3, 2}, {2, 2}},           // padding of half the kernel
      {{2, 2, 5, 6, 7}, {2, 3, 2}, {2, 1, 3}, {1, 1, 0}},  // 3-D, mixed
      {{1, 2, 4, 4, 4}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}},  // unet3d's pool
  };
}

PoolGeometry geometry_of(const PoolCase& c, const Shape& out) {
  return cuda::pool_geometry(c.in, out, c.kernel, c.stride, c.padding);
}

PoolOptions options_of(const PoolCase& c) { return {.kernel = c.kernel, .stride = c.stride, .padding = c.padding}; }

TEST(CudaPoolIndex, MaxWindowsMatchCpuValuesAndWinners) {
  uint64_t seed = 1;
  for (const PoolCase& c : cases()) {
    const Tensor x = tie_heavy(c.in, seed++);
    const Shape out_shape = max_pool(x, options_of(c)).shape();
    Tensor out = Tensor::empty(out_shape), argmax = Tensor::empty(out_shape);
    cpu::max_pool_forward(x, options_of(c), out, argmax);
    const PoolGeometry g = geometry_of(c, out_shape);
    for (int64_t i = 0; i < out.numel(); ++i) {
      int64_t arg = -1;
      const float v = cuda::max_pool_window(g, x.data() + i / g.out_size * g.in_size, i % g.out_size, arg);
      ASSERT_TRUE(same(v, out.data()[i])) << describe(c) << " output " << i << ": " << v << " vs " << out.data()[i];
      ASSERT_EQ(static_cast<float>(arg), argmax.data()[i]) << describe(c) << " output " << i;
    }
  }
}

TEST(CudaPoolIndex, MaxGradientGatherMatchesCpuScatter) {
  uint64_t seed = 20;
  for (const PoolCase& c : cases()) {
    const Tensor x = tie_heavy(c.in, seed++);
    const Shape out_shape = max_pool(x, options_of(c)).shape();
    Tensor out = Tensor::empty(out_shape), argmax = Tensor::empty(out_shape);
    cpu::max_pool_forward(x, options_of(c), out, argmax);
    const Tensor gy = uniform(out_shape, seed++);
    Tensor dx = Tensor::empty(c.in);
    cpu::max_pool_backward(gy, argmax, options_of(c), dx);
    const PoolGeometry g = geometry_of(c, out_shape);
    for (int64_t i = 0; i < dx.numel(); ++i) {
      const int64_t plane = i / g.in_size;
      const float v = cuda::max_pool_input_grad(g, gy.data() + plane * g.out_size, argmax.data() + plane * g.out_size,
                                                i % g.in_size);
      // The same additions in the same order: equal bits (up to the sign of a zero).
      ASSERT_EQ(v, dx.data()[i]) << describe(c) << " input " << i;
    }
  }
}

TEST(CudaPoolIndex, AvgWindowsAndGradientsMatchCpu) {
  uint64_t seed = 40;
  for (const PoolCase& c : cases()) {
    const Tensor x = uniform(c.in, seed++);
    const Shape out_shape = avg_pool(x, options_of(c)).shape();
    Tensor out = Tensor::empty(out_shape);
    cpu::avg_pool_forward(x, options_of(c), out);
    const PoolGeometry g = geometry_of(c, out_shape);
    for (int64_t i = 0; i < out.numel(); ++i)
      ASSERT_EQ(cuda::avg_pool_window(g, x.data() + i / g.out_size * g.in_size, i % g.out_size), out.data()[i])
          << describe(c) << " output " << i;

    const Tensor gy = uniform(out_shape, seed++);
    Tensor dx = Tensor::empty(c.in);
    cpu::avg_pool_backward(gy, options_of(c), dx);
    for (int64_t i = 0; i < dx.numel(); ++i) {
      const float v = cuda::avg_pool_input_grad(g, gy.data() + i / g.in_size * g.out_size, i % g.in_size);
      // Same order of additions; a compiler may fuse a product into an add on one side.
      EXPECT_NEAR(v, dx.data()[i], 1e-6f * (1.0f + std::abs(dx.data()[i]))) << describe(c) << " input " << i;
    }
  }
}

// covering_outputs against the definition, over small sizes, strides, kernels, padding.
TEST(CudaPoolIndex, CoveringOutputsAreExactlyTheWindowsThatReachACell) {
  for (int64_t k = 1; k <= 4; ++k)
    for (int64_t s = 1; s <= 4; ++s)
      for (int64_t p = 0; 2 * p <= k; ++p)
        for (int64_t in = 1; in <= 9; ++in) {
          if (in + 2 * p < k) continue;
          const int64_t out = (in + 2 * p - k) / s + 1;
          for (int64_t i = 0; i < in; ++i) {
            int64_t lo = 0, hi = 0;
            cuda::covering_outputs(i, k, s, p, out, lo, hi);
            for (int64_t o = 0; o < out; ++o) {
              const bool covers = o * s - p <= i && i <= o * s - p + k - 1;
              EXPECT_EQ(covers, o >= lo && o < hi) << "k " << k << " s " << s << " p " << p << " in " << in << " i "
                                                   << i << " o " << o;
            }
          }
        }
}

}  // namespace
}  // namespace quartet::engine

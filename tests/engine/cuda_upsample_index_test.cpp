// The index arithmetic of the CUDA upsample kernels (engine/cuda/upsample_index.h), run
// on the host against the CPU kernels: the same taps, sums and order, so the device
// agrees with the CPU wherever its float arithmetic does.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/cuda/upsample_index.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::random_tensor;

struct Case {
  Shape in;
  std::vector<int64_t> scale;  // one per spatial dim
};

const std::vector<Case> kCases = {
    {{2, 3, 5}, {3}},
    {{1, 1, 1}, {4}},
    {{2, 2, 4, 5}, {2, 3}},
    {{1, 3, 3, 1}, {1, 5}},
    {{1, 2, 3, 4, 2}, {2, 1, 3}},
    {{2, 1, 2, 2, 2}, {2, 2, 2}},
};

Shape scaled(const Case& c) {
  Shape out = c.in;
  for (size_t i = 0; i < c.scale.size(); ++i) out[2 + i] *= c.scale[i];
  return out;
}

std::string name(const Case& c, UpsampleMode mode) {
  return shape_str(c.in) + (mode == UpsampleMode::linear ? " linear" : " nearest");
}

cuda::UpsampleGeometry geometry(const Shape& in, const Shape& out, UpsampleMode mode) {
  return cuda::upsample_geometry(in.data(), out.data(), static_cast<int>(in.size()), mode == UpsampleMode::linear);
}

void expect_close(float got, float want, const std::string& where) {
  EXPECT_NEAR(got, want, 1e-6f * (1.0f + std::abs(want))) << where;
}

TEST(CudaUpsampleIndex, ReadersHoldEveryOutputCellWithATapOnTheInputCell) {
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{1, 1}, {1, 7}, {2, 2}, {5, 3}, {9, 6}, {1000, 3}, {777, 7}};
  for (bool linear : {false, true})
    for (auto [in, s] : sizes)
      for (int64_t i = 0; i < in; ++i) {
        const int64_t out = in * s;
        int64_t lo = 0, hi = 0;
        cuda::upsample_readers(i, in, out, linear, &lo, &hi);
        for (int64_t o = 0; o < out; ++o) {
          const cuda::UpsampleTaps t = cuda::upsample_taps(o, in, out, linear);
          if (!cuda::upsample_taps_read(t, linear ? 2 : 1, i)) continue;
          ASSERT_TRUE(o >= lo && o < hi) << "in " << in << " s " << s << " cell " << i << " reader " << o
                                         << " outside [" << lo << ", " << hi << ")";
        }
      }
}

TEST(CudaUpsampleIndex, LinearTapsAreTheCpuTaps) {
  // In 1D the CPU's output is the taps' weighted sum: recover them from unit inputs.
  for (int64_t in : {1, 2, 5})
    for (int64_t s : {1, 2, 3, 4}) {
      for (int64_t i = 0; i < in; ++i) {
        std::vector<float> unit(static_cast<size_t>(in), 0.0f);
        unit[i] = 1.0f;
        const std::vector<float> y =
            upsample(Tensor::from_vector({1, 1, in}, unit), {s}, UpsampleMode::linear).to_vector();
        for (int64_t o = 0; o < in * s; ++o) {
          const cuda::UpsampleTaps t = cuda::upsample_taps(o, in, in * s, true);
          const float w = (t.index[0] == i ? t.weight[0] : 0.0f) + (t.index[1] == i ? t.weight[1] : 0.0f);
          expect_close(w, y[o], "in " + std::to_string(in) + " s " + std::to_string(s) + " o " + std::to_string(o));
        }
      }
    }
}

TEST(CudaUpsampleIndex, ForwardCellsMatchTheCpuKernel) {
  for (UpsampleMode mode : {UpsampleMode::nearest, UpsampleMode::linear})
    for (size_t k = 0; k < kCases.size(); ++k) {
      const Case& c = kCases[k];
      const Tensor x = random_tensor(c.in, 40 + k);
      const std::vector<float> y = upsample(x, c.scale, mode).to_vector();
      const cuda::UpsampleGeometry g = geometry(c.in, scaled(c), mode);
      const int64_t planes = c.in[0] * c.in[1];
      ASSERT_EQ(static_cast<int64_t>(y.size()), planes * g.out_size) << name(c, mode);
      for (int64_t p = 0; p < planes; ++p)
        for (int64_t o = 0; o < g.out_size; ++o)
          expect_close(cuda::upsample_forward_at(g, x.data() + p * g.in_size, o), y[p * g.out_size + o],
                       name(c, mode) + " plane " + std::to_string(p) + " cell " + std::to_string(o));
    }
}

TEST(CudaUpsampleIndex, BackwardGatherMatchesTheCpuAdjoint) {
  for (UpsampleMode mode : {UpsampleMode::nearest, UpsampleMode::linear})
    for (size_t k = 0; k < kCases.size(); ++k) {
      const Case& c = kCases[k];
      Tensor x = random_tensor(c.in, 60 + k);
      x.set_requires_grad(true);
      const Tensor y = upsample(x, c.scale, mode);
      const Tensor gy = random_tensor(y.shape(), 80 + k);
      y.backward(gy);
      const std::vector<float> want = x.grad().to_vector();
      const cuda::UpsampleGeometry g = geometry(c.in, y.shape(), mode);
      for (int64_t p = 0; p < c.in[0] * c.in[1]; ++p)
        for (int64_t i = 0; i < g.in_size; ++i)
          expect_close(cuda::upsample_backward_at(g, gy.data() + p * g.out_size, i), want[p * g.in_size + i],
                       name(c, mode) + " plane " + std::to_string(p) + " cell " + std::to_string(i));
    }
}

}  // namespace
}  // namespace quartet::engine

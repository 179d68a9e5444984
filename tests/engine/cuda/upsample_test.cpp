// The CUDA upsample against the CPU's: nearest and linear over 1 to 3 spatial dims, with
// the factors PyTorch's align_corners=false treats unevenly (odd, mixed, 1), forward and
// the adjoint. Both devices sum the same taps in the same order.
#include <vector>

#include "tests/engine/cuda/op_check.h"

namespace quartet::engine::cuda_test {
namespace {

using Inputs = std::vector<Tensor>;

struct Case {
  Shape in;
  std::vector<int64_t> scale;
};

const std::vector<Case> kCases = {
    {{2, 3, 17}, {3}},
    {{1, 2, 1}, {4}},
    {{2, 3, 9, 11}, {2}},
    {{1, 4, 5, 6}, {3, 1}},
    {{2, 2, 4, 5, 6}, {2}},
    {{1, 3, 3, 4, 5}, {1, 2, 3}},
    {{1, 8, 16, 16, 16}, {2}},
};

TEST(CudaUpsample, NearestMatchesExactly) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 1;
  for (const Case& c : kCases)
    expect_same_on_gpu("upsample nearest " + shape_str(c.in), {random_tensor(c.in, seed++)},
                       [&c](const Inputs& v) { return upsample(v[0], c.scale, UpsampleMode::nearest); }, 0.0);
}

// Same taps and order; only where each side fuses a multiply-add may the rounding differ,
// by an ulp of a partial sum per tap (up to 64 taps a cell in 3D).
TEST(CudaUpsample, LinearMatches) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 20;
  for (const Case& c : kCases)
    expect_same_on_gpu("upsample linear " + shape_str(c.in), {random_tensor(c.in, seed++)},
                       [&c](const Inputs& v) { return upsample(v[0], c.scale, UpsampleMode::linear); }, 1e-5);
}

}  // namespace
}  // namespace quartet::engine::cuda_test

// The CUDA concat against the CPU's: along every dim, forward and each part's gradient
// (concat_slice), which are copies and so match exactly.
#include <vector>

#include "tests/engine/cuda/op_check.h"

namespace quartet::engine::cuda_test {
namespace {

using Inputs = std::vector<Tensor>;

TEST(CudaConcat, EveryDimMatchesExactly) {
  QUARTET_NEED_GPU(1);
  Generator gen(3);
  uint64_t seed = 1;
  for (int rank = 1; rank <= 5; ++rank)
    for (int dim = 0; dim < rank; ++dim) {
      Shape base(rank);
      for (int64_t& d : base) d = 1 + static_cast<int64_t>(gen.below(6));
      Inputs parts;
      const int count = 2 + static_cast<int>(gen.below(2));
      for (int k = 0; k < count; ++k) {
        Shape s = base;
        s[dim] = 1 + static_cast<int64_t>(gen.below(5));
        parts.push_back(random_tensor(s, seed++));
      }
      expect_same_on_gpu("concat dim " + std::to_string(dim) + " of " + shape_str(base) + " x" + std::to_string(count),
                         parts, [dim](const Inputs& v) { return concat(v, dim); }, 0.0);
    }
}

// A U-Net skip: two feature maps along the channels, large enough for many blocks.
TEST(CudaConcat, ChannelSkipMatchesExactly) {
  QUARTET_NEED_GPU(1);
  expect_same_on_gpu("concat skip", {random_tensor({2, 16, 12, 20, 20}, 1), random_tensor({2, 8, 12, 20, 20}, 2)},
                     [](const Inputs& v) { return concat(v, 1); }, 0.0);
}

}  // namespace
}  // namespace quartet::engine::cuda_test

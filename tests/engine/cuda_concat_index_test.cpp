// The index arithmetic of the CUDA concat kernels (engine/cuda/concat_index.h), run on
// the host against the CPU concat: every element of every part lands where the CPU puts
// it, and every element of the whole comes from exactly one part.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/cuda/concat_index.h"
#include "engine/ops.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::random_tensor;

TEST(CudaConcatIndex, PartsLandWhereTheCpuConcatPutsThem) {
  const Shape base = {2, 3, 4, 2};
  const std::vector<int64_t> part_sizes = {1, 3, 2};
  for (int rank = 1; rank <= 4; ++rank)
    for (int dim = 0; dim < rank; ++dim) {
      TensorList parts;
      for (size_t k = 0; k < part_sizes.size(); ++k) {
        Shape shape(base.begin(), base.begin() + rank);
        shape[dim] = part_sizes[k];
        parts.push_back(random_tensor(shape, 10 * rank + dim + 100 * k));
      }
      const Tensor whole = concat(parts, dim);
      const std::vector<float> w = whole.to_vector();
      const int64_t inner = cuda::concat_inner(whole.shape().data(), rank, dim);
      const int64_t whole_row = whole.size(dim) * inner;
      std::vector<int> hits(w.size(), 0);
      int64_t offset = 0;
      for (const Tensor& part : parts) {
        const int64_t row = part.size(dim) * inner;
        const std::vector<float> v = part.to_vector();
        for (int64_t j = 0; j < part.numel(); ++j) {
          const int64_t at = cuda::concat_whole_index(j, row, whole_row, offset);
          ASSERT_TRUE(at >= 0 && at < whole.numel()) << "rank " << rank << " dim " << dim << " element " << j;
          EXPECT_EQ(w[at], v[j]) << "rank " << rank << " dim " << dim << " element " << j;
          ++hits[at];
        }
        offset += row;
      }
      for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i], 1) << "rank " << rank << " dim " << dim << " at " << i;
    }
}

}  // namespace
}  // namespace quartet::engine

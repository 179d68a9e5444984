// The reduction indexing of the CUDA norm, bias-gradient and column-sum kernels
// (engine/cuda/norm_index.h), checked on the host: a channel's elements of an (N, C, L)
// array in the CPU's order, and the split of a reduction into parts.

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/cuda/norm_index.h"

namespace quartet::engine {
namespace {

using cuda::Planes;

TEST(CudaNormIndex, PlanesViewShapesAsNCL) {
  const Planes a = cuda::planes_of({4, 3});
  EXPECT_EQ(a.n, 4);
  EXPECT_EQ(a.c, 3);
  EXPECT_EQ(a.l, 1);
  const Planes b = cuda::planes_of({2, 5, 3, 4, 6});
  EXPECT_EQ(b.n, 2);
  EXPECT_EQ(b.c, 5);
  EXPECT_EQ(b.l, 72);
}

// Element j of channel ch walks sample by sample, positions in order, as the CPU's
// loops do; together the channels cover every element once.
TEST(CudaNormIndex, ChannelElementsInCpuOrder) {
  const Planes p = cuda::planes_of({3, 4, 5});
  std::vector<int> seen(static_cast<size_t>(p.n * p.c * p.l), 0);
  for (int64_t ch = 0; ch < p.c; ++ch) {
    int64_t j = 0;
    for (int64_t i = 0; i < p.n; ++i)
      for (int64_t k = 0; k < p.l; ++k, ++j) {
        const int64_t index = cuda::channel_element(p, ch, j);
        EXPECT_EQ(index, (i * p.c + ch) * p.l + k);
        EXPECT_EQ(cuda::channel_of(p, index), ch);
        ++seen[static_cast<size_t>(index)];
      }
  }
  for (int s : seen) EXPECT_EQ(s, 1);
}

// Parts are contiguous, in order, cover [0, count) once, and differ by at most one
// element; their number depends on the count alone and stays within the bounds.
TEST(CudaNormIndex, PartsCoverEachElementOnce) {
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{255}, cuda::kMinPartElements, cuda::kMinPartElements + 1,
                        int64_t{2} * 64 * 64 * 64, int64_t{1} << 31}) {
    const int64_t parts = cuda::parts_for(count);
    EXPECT_GE(parts, 1);
    EXPECT_LE(parts, cuda::kMaxParts);
    if (count <= cuda::kMinPartElements) {
      EXPECT_EQ(parts, 1) << count;
    }
    EXPECT_EQ(cuda::part_begin(count, parts, 0), 0);
    EXPECT_EQ(cuda::part_begin(count, parts, parts), count);
    for (int64_t q = 0; q < parts; ++q) {
      const int64_t size = cuda::part_begin(count, parts, q + 1) - cuda::part_begin(count, parts, q);
      EXPECT_GE(size, count / parts) << count << " part " << q;
      EXPECT_LE(size, count / parts + 1) << count << " part " << q;
    }
  }
}

}  // namespace
}  // namespace quartet::engine

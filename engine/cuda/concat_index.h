#pragma once

// Index arithmetic of concat on the device, checked on the host by
// tests/engine/cuda_concat_index_test.cpp. A tensor is viewed along the concat dim as
// (outer, rows of `row` contiguous values); the concatenated tensor has rows of `whole_row`
// values, and a part's row starts `offset` values into each of them.
#include <cstdint>

#include "engine/cuda/hd.h"

namespace quartet::engine::cuda {

// Product of the sizes after `dim` of a shape of `rank` sizes.
QUARTET_HD int64_t concat_inner(const int64_t* shape, int rank, int dim) {
  int64_t n = 1;
  for (int i = dim + 1; i < rank; ++i) n *= shape[i];
  return n;
}

// Where element j of a part (row values per row) sits in the whole.
QUARTET_HD int64_t concat_whole_index(int64_t j, int64_t row, int64_t whole_row, int64_t offset) {
  const int64_t o = j / row;
  return o * whole_row + offset + (j - o * row);
}

}  // namespace quartet::engine::cuda

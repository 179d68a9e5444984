#pragma once

// Indexing of the per-channel and per-group reductions of the CUDA kernels (batch and
// group norm, bias gradients, column sums): x (N, C, *spatial) viewed as (N, C, L), the
// elements of one channel in sample-then-position order, and the fixed split of a long
// reduction into parts, which depends on the sizes alone so every run adds alike. No
// CUDA types: the host tests check it without a GPU.

#include <cstdint>
#include <vector>

#include "engine/cuda/hd.h"

namespace quartet::engine::cuda {

// x (N, C, *spatial) as (N, C, L); L is 1 for (N, C) input.
struct Planes {
  int64_t n = 0, c = 0, l = 1;
};

inline Planes planes_of(const std::vector<int64_t>& shape) {
  Planes p;
  p.n = shape[0];
  p.c = shape[1];
  for (size_t d = 2; d < shape.size(); ++d) p.l *= shape[d];
  return p;
}

// The channel of element `index` of x.
QUARTET_HD int64_t channel_of(const Planes& p, int64_t index) { return index / p.l % p.c; }

// Element j (< N * L) of channel ch, in the order the CPU walks it: sample by sample,
// positions in order within each.
QUARTET_HD int64_t channel_element(const Planes& p, int64_t ch, int64_t j) {
  return (j / p.l * p.c + ch) * p.l + j % p.l;
}

// Elements a part of a reduction takes at least (256 threads x 32 each), and the most
// parts one reduction is split into.
inline constexpr int64_t kMinPartElements = int64_t{256} * 32;
inline constexpr int64_t kMaxParts = 128;

// How many parts a reduction over `count` elements is split into: enough to fill the
// GPU when there are few segments (a 3-D U-Net's 32 channels of 2 x 64^3 cells), one
// when the count is small.
inline int64_t parts_for(int64_t count) {
  const int64_t parts = (count + kMinPartElements - 1) / kMinPartElements;
  return parts < 1 ? 1 : (parts > kMaxParts ? kMaxParts : parts);
}

// Part q of `parts` covers elements [part_begin(q), part_begin(q + 1)) of `count`.
QUARTET_HD int64_t part_begin(int64_t count, int64_t parts, int64_t q) {
  return count / parts * q + count % parts * q / parts;
}

}  // namespace quartet::engine::cuda

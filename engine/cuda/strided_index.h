#pragma once

// Index arithmetic of the broadcasting and layout kernels (engine/cpu/broadcast.h and
// its CUDA twin), shared by both, so the CPU kernels' tests (tests/engine/broadcast_test.cpp)
// check it on machines without a GPU. Shapes are padded to kMaxDims sizes with
// leading ones; an element of an output is found in an input by strides, a stride of 0
// repeating the input along a broadcast dim.
#include <cstdint>

#include "engine/cuda/hd.h"

namespace quartet::engine::cuda {

inline constexpr int kStridedDims = 5;  // engine::kMaxDims

// out[i] reads in[strided_offset(map, i)]: i split by `size` (the output's sizes,
// outermost first), each coordinate times its stride, plus base.
struct StridedMap {
  int64_t size[kStridedDims];
  int64_t stride[kStridedDims];
  int64_t base;
};

QUARTET_HD int64_t strided_offset(const StridedMap& m, int64_t i) {
  int64_t off = m.base;
  for (int d = kStridedDims - 1; d >= 0; --d) {
    const int64_t s = m.size[d];
    off += (i % s) * m.stride[d];
    i /= s;
  }
  return off;
}

// Constant padding: out (size) holds in (in_size, in_stride) starting `begin` cells into
// every dim; the offset of out's element i in `in`, or -1 for a padded cell.
struct PadMap {
  int64_t size[kStridedDims];
  int64_t begin[kStridedDims];
  int64_t in_size[kStridedDims];
  int64_t in_stride[kStridedDims];
};

QUARTET_HD int64_t pad_source(const PadMap& m, int64_t i) {
  int64_t off = 0;
  for (int d = kStridedDims - 1; d >= 0; --d) {
    const int64_t c = i % m.size[d] - m.begin[d];
    i /= m.size[d];
    if (c < 0 || c >= m.in_size[d]) return -1;
    off += c * m.in_stride[d];
  }
  return off;
}

enum class BinaryKind { add, sub, mul, div };

QUARTET_HD float apply_binary(BinaryKind k, float a, float b) {
  switch (k) {
    case BinaryKind::add: return a + b;
    case BinaryKind::sub: return a - b;
    case BinaryKind::mul: return a * b;
    default: return a / b;
  }
}

}  // namespace quartet::engine::cuda

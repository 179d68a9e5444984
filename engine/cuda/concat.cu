#include "engine/cuda/concat.h"

#include "engine/cuda/concat_index.h"
#include "engine/cuda/map_reduce.cuh"
#include "engine/cuda/runtime.h"

namespace quartet::engine::cuda {
namespace {

// Element j of a part goes into the whole (scatter = true: concat) or comes from it
// (concat_slice). Every element is written once: no ordering between threads matters.
struct PartCopy {
  const float* src;
  float* dst;
  int64_t row, whole_row, offset;
  bool scatter;
  __device__ void operator()(int64_t j) const {
    const int64_t w = concat_whole_index(j, row, whole_row, offset);
    if (scatter) dst[w] = src[j];
    else dst[j] = src[w];
  }
};

int64_t inner_of(const Shape& shape, int dim) {
  return concat_inner(shape.data(), static_cast<int>(shape.size()), dim);
}

}  // namespace

void concat(const TensorList& xs, int dim, Tensor& out) {
  const int64_t inner = inner_of(out.shape(), dim);
  const int64_t whole_row = out.size(dim) * inner;
  const cudaStream_t stream = stream_of(out);
  int64_t offset = 0;
  for (const Tensor& x : xs) {
    const int64_t row = x.size(dim) * inner;
    // One launch per part: a concat has few parts (a U-Net skip: two).
    if (row > 0) for_each(x.numel(), PartCopy{x.device_data(), out.device_data(), row, whole_row, offset, true},
                          stream, "concat");
    offset += row;
  }
}

void concat_slice(const Tensor& whole, int dim, int64_t offset, Tensor& slice) {
  const int64_t inner = inner_of(whole.shape(), dim);
  const int64_t whole_row = whole.size(dim) * inner, row = slice.size(dim) * inner;
  if (row == 0) return;
  for_each(slice.numel(), PartCopy{whole.device_data(), slice.device_data(), row, whole_row, offset * inner, false},
           stream_of(slice), "concat_slice");
}

}  // namespace quartet::engine::cuda

#include "engine/cpu/concat.h"

#include <algorithm>

namespace quartet::engine::cpu {
namespace {

int64_t inner_size(const Shape& shape, int dim) {
  int64_t n = 1;
  for (size_t i = dim + 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

int64_t outer_size(const Shape& shape, int dim) {
  int64_t n = 1;
  for (int i = 0; i < dim; ++i) n *= shape[i];
  return n;
}

}  // namespace

void concat(const TensorList& xs, int dim, Tensor& out) {
  const int64_t outer = outer_size(out.shape(), dim), inner = inner_size(out.shape(), dim);
  const int64_t out_row = out.size(dim) * inner;
  float* po = out.data();
  int64_t offset = 0;
  for (const Tensor& x : xs) {
    const int64_t row = x.size(dim) * inner;
    const float* px = x.data();
    for (int64_t o = 0; o < outer; ++o) std::copy_n(px + o * row, row, po + o * out_row + offset);
    offset += row;
  }
}

void concat_slice(const Tensor& whole, int dim, int64_t offset, Tensor& slice) {
  const int64_t outer = outer_size(whole.shape(), dim), inner = inner_size(whole.shape(), dim);
  const int64_t whole_row = whole.size(dim) * inner, row = slice.size(dim) * inner;
  const float* pw = whole.data() + offset * inner;
  float* ps = slice.data();
  for (int64_t o = 0; o < outer; ++o) std::copy_n(pw + o * whole_row, row, ps + o * row);
}

}  // namespace quartet::engine::cpu

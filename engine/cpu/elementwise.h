#pragma once

#include "engine/tensor.h"

// Element-wise kernels on host tensors. Shapes are checked by the callers.
namespace quartet::engine::cpu {

void fill(Tensor& out, float value);
void copy(const Tensor& src, Tensor& out);
void add(const Tensor& a, const Tensor& b, Tensor& out);      // out = a + b
void add_(Tensor& acc, const Tensor& x, float alpha);         // acc += alpha * x
void mul(const Tensor& a, const Tensor& b, Tensor& out);      // out = a * b
void scale(const Tensor& a, float s, Tensor& out);            // out = s * a
// ReLU keeps one bit per element for its backward: `mask` holds relu_mask_words(numel)
// 32-bit words (in float storage), bit i % 32 of word i / 32 set where out[i] > 0; an
// undefined mask is not written. grad_in may be grad_out.
inline int64_t relu_mask_words(int64_t numel) { return (numel + 31) / 32; }
void relu(const Tensor& x, Tensor& out, Tensor& mask);
void relu_backward(const Tensor& grad_out, const Tensor& mask, Tensor& grad_in);
float sum(const Tensor& x);
double sum_squares(const Tensor& x);
void copy_range(Tensor& dst, int64_t dst_offset, const Tensor& src, int64_t src_offset, int64_t count);
void fill_range(Tensor& t, int64_t offset, int64_t count, float value);
void round_to_half(Tensor& t, int64_t offset, int64_t count);

}  // namespace quartet::engine::cpu

namespace quartet::engine::cpu {
// out[i] = factor * scalar[0] for every i.
void fill_from_scalar(const Tensor& scalar, float factor, Tensor& out);
}  // namespace quartet::engine::cpu

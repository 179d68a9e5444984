#pragma once

// The CUDA twins of engine/cpu/elementwise.h: element-wise kernels on device tensors,
// same names, signatures and results. Shapes are checked by the callers.
#include <cstdint>

#include "engine/tensor.h"

namespace quartet::engine::cuda {

void fill(Tensor& out, float value);
// Also the copy between devices: host to device, device to host, device to device
// (one GPU or two). Returns once the host side, if any, may be read or reused.
void copy(const Tensor& src, Tensor& out);
void add(const Tensor& a, const Tensor& b, Tensor& out);  // out = a + b
void add_(Tensor& acc, const Tensor& x, float alpha);     // acc += alpha * x
void mul(const Tensor& a, const Tensor& b, Tensor& out);  // out = a * b
void scale(const Tensor& a, float s, Tensor& out);        // out = s * a; out may be a
// NaN passes through; the mask as cpu::relu's (undefined: not written).
void relu(const Tensor& x, Tensor& out, Tensor& mask);
// grad_in may be grad_out itself.
void relu_backward(const Tensor& grad_out, const Tensor& mask, Tensor& grad_in);
// Sums in double, deterministically (fixed grid and tree); waits for the device.
float sum(const Tensor& x);
double sum_squares(const Tensor& x);
void copy_range(Tensor& dst, int64_t dst_offset, const Tensor& src, int64_t src_offset, int64_t count);
void fill_range(Tensor& t, int64_t offset, int64_t count, float value);
// Round to the nearest IEEE half (ties to even, overflow to inf) and back.
void round_to_half(Tensor& t, int64_t offset, int64_t count);
// out[i] = factor * scalar[0], scalar a [1] device tensor read on the device.
void fill_from_scalar(const Tensor& scalar, float factor, Tensor& out);

}  // namespace quartet::engine::cuda

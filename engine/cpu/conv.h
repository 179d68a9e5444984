#pragma once

// Convolution and transposed convolution over 1 to 3 spatial dims by im2col + GEMM;
// both share one geometry, im2col and col2im. Kernels take tensors the op has already
// checked and allocated; `opt` holds exactly one value per spatial dim.

#include "engine/ops.h"
#include "engine/tensor.h"

namespace quartet::engine::cpu {

// ---- conv: x (N, Cin, *in), weight (Cout, Cin, *kernel), out / grad_out (N, Cout, *out) ----

// out = conv(x, weight) + bias; bias may be undefined. Where conv_kernel_for (conv_kernel.h)
// says so, this and conv_backward's input gradient run the Winograd kernel instead.
void conv_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt,
                  Tensor& out);

// Writes (overwrites) each gradient that is defined and skips the undefined ones:
// grad_x like x, grad_weight like weight, grad_bias (Cout).
// ensures: results do not depend on thread scheduling (fixed summation order).
void conv_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out, const ConvOptions& opt,
                   Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias);

// ---- conv_transpose: x (N, Cin, *in), weight (Cin, Cout, *kernel),
// out / grad_out (N, Cout, *out); output_padding is already in out's shape ----

// out = the input-gradient of conv(out-shaped input, weight) at x, + bias.
void conv_transpose_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const ConvTransposeOptions& opt, Tensor& out);

// Writes (overwrites) each gradient that is defined and skips the undefined ones.
// ensures: results do not depend on thread scheduling (fixed summation order).
void conv_transpose_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                             const ConvTransposeOptions& opt, Tensor& grad_x, Tensor& grad_weight,
                             Tensor& grad_bias);

}  // namespace quartet::engine::cpu

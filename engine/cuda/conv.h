#pragma once

// The CUDA twins of engine/cpu/conv.h: convolution and transposed convolution over 1 to
// 3 spatial dims on cuDNN, bias and bias gradient on own kernels. Kernels take tensors
// the op has already checked and allocated on one cuda device; `opt` holds exactly one
// value per spatial dim.

#include "engine/ops.h"
#include "engine/tensor.h"

namespace quartet::engine::cuda {

// ---- conv: x (N, Cin, *in), weight (Cout, Cin, *kernel), out / grad_out (N, Cout, *out) ----

// out = conv(x, weight) + bias; bias may be undefined.
void conv_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt,
                  Tensor& out);

// Writes (overwrites) each gradient that is defined and skips the undefined ones:
// grad_x like x, grad_weight like weight, grad_bias (Cout).
// ensures: the same bits on every run (deterministic cuDNN algorithms where cuDNN offers
// one, a fixed-order bias sum).
void conv_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out, const ConvOptions& opt,
                   Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias);

// ---- conv_transpose: x (N, Cin, *in), weight (Cin, Cout, *kernel),
// out / grad_out (N, Cout, *out); output_padding is already in out's shape ----

// out = the input-gradient of conv(out-shaped input, weight) at x, + bias.
void conv_transpose_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const ConvTransposeOptions& opt, Tensor& out);

// Writes (overwrites) each gradient that is defined and skips the undefined ones.
void conv_transpose_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                             const ConvTransposeOptions& opt, Tensor& grad_x, Tensor& grad_weight,
                             Tensor& grad_bias);

}  // namespace quartet::engine::cuda

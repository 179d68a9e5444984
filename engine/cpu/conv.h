#pragma once

// Convolution over 1 to 3 spatial dims by im2col + GEMM. Kernels take tensors the op
// has already checked and allocated; `opt` holds exactly one value per spatial dim.
// x: (N, Cin, *in), weight: (Cout, Cin, *kernel), out / grad_out: (N, Cout, *out).

#include "engine/ops.h"
#include "engine/tensor.h"

namespace quartet::engine::cpu {

// out = conv(x, weight) + bias; bias may be undefined.
void conv_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt,
                  Tensor& out);

// Writes (overwrites) each gradient that is defined and skips the undefined ones:
// grad_x like x, grad_weight like weight, grad_bias (Cout).
// ensures: results do not depend on thread scheduling (fixed summation order).
void conv_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out, const ConvOptions& opt,
                   Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias);

}  // namespace quartet::engine::cpu

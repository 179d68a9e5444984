#pragma once

// Which CPU kernel computes a convolution: im2col + GEMM (engine/cpu/conv.cpp) or
// Winograd (engine/cpu/winograd.h).

#include "engine/ops.h"
#include "engine/tensor.h"

namespace quartet::engine::cpu {

enum class ConvKernel { im2col, winograd };

// The kernel a forward (or input-gradient) conv of this shape uses. Fixed rules, so
// every process (every rank) picks the same one and regimes stay bit-for-bit equal:
// Winograd where winograd_applies, else im2col.
// QUARTET_CONV_KERNEL=im2col|winograd|auto (default auto) forces one for tests and
// benchmarks; winograd is forced only where winograd_supports, im2col elsewhere.
// A bad value: std::invalid_argument naming the variable and the allowed values.
ConvKernel conv_kernel_for(const Tensor& x, const Tensor& weight, const ConvOptions& opt);

const char* conv_kernel_name(ConvKernel k);

}  // namespace quartet::engine::cpu

#pragma once

// The CUDA twins of engine/cpu/upsample.h: upsampling by integer factors over 1 to 3
// spatial dims on device tensors the op has checked and allocated. x / grad_x:
// (N, C, *in), out / grad_out: (N, C, *out) with out = in * scale per dim.
#include "engine/ops.h"
#include "engine/tensor.h"

namespace quartet::engine::cuda {

// nearest: out[o] = x[o / s]; linear: align_corners=false, the CPU's taps and order.
void upsample_forward(const Tensor& x, UpsampleMode mode, Tensor& out);

// grad_x (overwritten) = the adjoint, each cell gathering the grad_out cells that read
// it (one thread per cell, no atomics: deterministic).
void upsample_backward(const Tensor& grad_out, UpsampleMode mode, Tensor& grad_x);

}  // namespace quartet::engine::cuda

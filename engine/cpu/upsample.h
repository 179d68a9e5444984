#pragma once

// Upsampling by integer factors over 1 to 3 spatial dims. Kernels take tensors the op has
// already checked and allocated. x / grad_x: (N, C, *in), out / grad_out: (N, C, *out)
// with out = in * scale per dim.

#include "engine/ops.h"
#include "engine/tensor.h"

namespace quartet::engine::cpu {

// nearest: out[o] = x[o / s]. linear (align_corners=false, as PyTorch computes it): the
// source coordinate is max((o + 0.5) / s - 0.5, 0) in float; out interpolates linearly
// between its floor and the next cell (clamped to the last), separably per dim.
void upsample_forward(const Tensor& x, UpsampleMode mode, Tensor& out);

// grad_x (overwritten) = the adjoint: each grad_out element spread back with the same
// weights onto the cells it was read from.
void upsample_backward(const Tensor& grad_out, UpsampleMode mode, Tensor& grad_x);

}  // namespace quartet::engine::cpu

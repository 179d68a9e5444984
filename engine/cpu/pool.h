#pragma once

// Max pooling over 1 to 3 spatial dims. Kernels take tensors the op has already checked
// and allocated; `opt` holds exactly one kernel, stride and padding value per spatial dim.
// x: (N, C, *in), out / argmax / grad_out: (N, C, *out).

#include "engine/ops.h"
#include "engine/tensor.h"

namespace quartet::engine::cpu {

// out = the max of each window over the real (unpadded) cells; argmax = the winner's
// offset inside its window, row-major over the kernel dims, stored as a float (exact:
// the op keeps windows below 2^24 cells). Ties go to the first cell in window order;
// a NaN wins over numbers. An undefined argmax is skipped (no backward to come).
void max_pool_forward(const Tensor& x, const PoolOptions& opt, Tensor& out, Tensor& argmax);

// grad_x (overwritten) = each grad_out element added at its window's winner.
void max_pool_backward(const Tensor& grad_out, const Tensor& argmax, const PoolOptions& opt, Tensor& grad_x);

}  // namespace quartet::engine::cpu

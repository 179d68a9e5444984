#pragma once

// The CUDA twins of engine/cpu/pool.h: max and average pooling over 1 to 3 spatial dims
// and global average pooling, on own kernels so that ties, NaNs and summation order are
// the CPU's. Kernels take tensors the op has already checked and allocated on one cuda
// device; `opt` holds exactly one kernel, stride and padding value per spatial dim.
// x: (N, C, *in), out / argmax / grad_out: (N, C, *out).

#include "engine/ops.h"
#include "engine/tensor.h"

namespace quartet::engine::cuda {

// out = the max of each window over the real (unpadded) cells; argmax = the winner's
// offset inside its window, row-major over the kernel dims, stored as a float. Ties go
// to the first cell in window order; a NaN wins over numbers. An undefined argmax is
// skipped.
void max_pool_forward(const Tensor& x, const PoolOptions& opt, Tensor& out, Tensor& argmax);

// grad_x (overwritten) = each grad_out element added at its window's winner; each input
// cell gathers from the windows covering it, in output order (no atomics).
void max_pool_backward(const Tensor& grad_out, const Tensor& argmax, const PoolOptions& opt, Tensor& grad_x);

// out = the sum of each window's real cells divided by the kernel's cell count (padded
// cells count as zeros: PyTorch's count_include_pad).
void avg_pool_forward(const Tensor& x, const PoolOptions& opt, Tensor& out);

// grad_x (overwritten) = each grad_out element / cells, spread over its window's real
// cells; gathered per input cell like max_pool_backward.
void avg_pool_backward(const Tensor& grad_out, const PoolOptions& opt, Tensor& grad_x);

// out (N, C) = the mean of each (n, c) plane of x (N, C, *spatial), summed in double.
void global_avg_pool_forward(const Tensor& x, Tensor& out);

// grad_x (overwritten) = grad_out[n, c] / (spatial cells) at every cell of plane (n, c).
void global_avg_pool_backward(const Tensor& grad_out, Tensor& grad_x);

}  // namespace quartet::engine::cuda

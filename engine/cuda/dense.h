#pragma once

// The CUDA twins of engine/cpu/dense.h: GEMM on cuBLAS, the row bias and its gradient
// on own kernels. Tensors live on one cuda device, allocated and checked by the ops.

#include "engine/tensor.h"

namespace quartet::engine::cuda {

// out = alpha * op(a) * op(b) + beta * out, row-major 2D; op transposes when asked.
// op(a): (M, K), op(b): (K, N), out: (M, N).
void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out,
          float alpha, float beta);
// out[i] = op(a[i]) op(b[i]) for every i < batch: a, b, out (batch, rows, cols); one
// GEMM per entry, gemm's layout rule.
void batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out);
// out: (N, F) += bias (F) on every row.
void add_row_bias(Tensor& out, const Tensor& bias);
// out (F) = sum over rows of x (N, F); deterministic (a fixed summation order).
void sum_rows(const Tensor& x, Tensor& out);

}  // namespace quartet::engine::cuda

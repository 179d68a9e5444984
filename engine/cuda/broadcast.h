#pragma once

// The CUDA twins of engine/cpu/broadcast.h: broadcasting and layout kernels on device
// tensors, same names, signatures and results (sums in the CPU's order). Maps and
// shapes are built and checked by the ops.
#include "engine/cuda/strided_index.h"
#include "engine/tensor.h"

namespace quartet::engine::cuda {

void strided_copy(const Tensor& x, const StridedMap& map, Tensor& out);
void broadcast_binary(BinaryKind kind, const Tensor& a, const StridedMap& ma, const Tensor& b,
                      const StridedMap& mb, Tensor& out);
// One thread per output element, adding its count terms in the CPU's order.
void strided_sum(const Tensor& x, const StridedMap& outer, const StridedMap& inner, int64_t count, Tensor& out);
void pad(const Tensor& x, const PadMap& map, float value, Tensor& out);
void where(const Tensor& c, const StridedMap& mc, const Tensor& a, const StridedMap& ma, const Tensor& b,
           const StridedMap& mb, Tensor& out);
void clip(const Tensor& x, float lo, float hi, Tensor& out);
void clip_backward(const Tensor& grad_out, const Tensor& x, float lo, float hi, Tensor& grad_in);
// batched_gemm lives in engine/cuda/dense.h, beside gemm.

}  // namespace quartet::engine::cuda

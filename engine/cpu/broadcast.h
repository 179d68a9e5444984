#pragma once

// Broadcasting and layout kernels on host tensors: every output element found in its
// inputs through a StridedMap (engine/cuda/strided_index.h). Maps and shapes are built
// and checked by the ops (engine/ops/broadcast.cpp).
#include "engine/cuda/strided_index.h"
#include "engine/tensor.h"

namespace quartet::engine::cpu {

using cuda::BinaryKind;
using cuda::PadMap;
using cuda::StridedMap;

// out[i] = x[offset(map, i)]: expand, transpose, crop.
void strided_copy(const Tensor& x, const StridedMap& map, Tensor& out);
// out[i] = a[offset(ma, i)] (kind) b[offset(mb, i)].
void broadcast_binary(BinaryKind kind, const Tensor& a, const StridedMap& ma, const Tensor& b,
                      const StridedMap& mb, Tensor& out);
// out[j] = sum over k < count of x[offset(outer, j) + offset(inner, k) - inner.base]:
// the broadcast dims summed away (inner spans them), in a fixed order.
void strided_sum(const Tensor& x, const StridedMap& outer, const StridedMap& inner, int64_t count, Tensor& out);
// out[i] = x[pad_source(map, i)], or value where that is -1.
void pad(const Tensor& x, const PadMap& map, float value, Tensor& out);
// out[i] = c[offset(mc, i)] != 0 ? a[offset(ma, i)] : b[offset(mb, i)].
void where(const Tensor& c, const StridedMap& mc, const Tensor& a, const StridedMap& ma, const Tensor& b,
           const StridedMap& mb, Tensor& out);
// out = min(max(x, lo), hi); grad_in = grad_out where lo <= x <= hi, else 0 (PyTorch's).
void clip(const Tensor& x, float lo, float hi, Tensor& out);
void clip_backward(const Tensor& grad_out, const Tensor& x, float lo, float hi, Tensor& grad_in);
// out[i] = op(a[i]) op(b[i]) for every i < batch: a, b, out (batch, rows, cols), as gemm.
void batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out);

}  // namespace quartet::engine::cpu

#pragma once

// The CUDA twins of engine/cpu/moe.h: softmax over the last dim, top-k gates and the
// weighted combine of expert rows, on tensors the ops have checked and allocated on one
// cuda device. One thread a row (or an output element); every sum in a fixed order.

#include <cstdint>

#include "engine/tensor.h"

namespace quartet::engine::cuda {

void softmax(const Tensor& x, Tensor& out);
void softmax_backward(const Tensor& grad_out, const Tensor& p, Tensor& grad_in);
void logsumexp(const Tensor& x, Tensor& out);
void logsumexp_backward(const Tensor& grad_out, const Tensor& x, const Tensor& out, Tensor& grad_in);
void top_k_gates(const Tensor& probs, int64_t k, bool normalize, Tensor& experts, Tensor& gates);
void top_k_gates_backward(const Tensor& grad_gates, const Tensor& probs, const Tensor& experts,
                          const Tensor& gates, bool normalize, Tensor& grad_probs);
void combine_rows(const Tensor& y, const Tensor& gates, const Tensor& slots, Tensor& out);
void combine_rows_backward(const Tensor& grad_out, const Tensor& y, const Tensor& gates, const Tensor& slots,
                           Tensor& grad_y, Tensor& grad_gates);

}  // namespace quartet::engine::cuda

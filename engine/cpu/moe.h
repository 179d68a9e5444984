#pragma once

// Mixture-of-experts kernels on host tensors the ops have checked and allocated: softmax
// over the last dim, the top-k gates of a router's probabilities, and the weighted
// combine of expert output rows back into token rows. Index tensors hold whole numbers
// as floats (as embedding's), -1 where a token's choice was dropped. Every sum runs in
// a fixed order: results do not depend on the thread count.

#include <cstdint>

#include "engine/tensor.h"

namespace quartet::engine::cpu {

// x, out (rows, F): out = exp(x - max) / sum exp(x - max) per row.
void softmax(const Tensor& x, Tensor& out);
// grad_in = p (grad_out - sum_j grad_out_j p_j) per row; p is softmax's output.
void softmax_backward(const Tensor& grad_out, const Tensor& p, Tensor& grad_in);
// x (rows, F) -> out (rows): log sum_j exp(x_j) per row, as max + log sum exp(x - max).
void logsumexp(const Tensor& x, Tensor& out);
// grad_in (rows, F) = grad_out[r] softmax(x)_rj, from x and out = logsumexp(x).
void logsumexp_backward(const Tensor& grad_out, const Tensor& x, const Tensor& out, Tensor& grad_in);

// probs (R, E) -> experts (R, K): each row's k largest in falling order (the lower index
// first on a tie); gates (R, K) their probabilities, divided by their row's sum when
// normalize.
void top_k_gates(const Tensor& probs, int64_t k, bool normalize, Tensor& experts, Tensor& gates);
// grad_probs (R, E) = 0 but at each row's chosen experts: grad_gates, through the
// division by the row's sum when normalize (gates as forward returned them).
void top_k_gates_backward(const Tensor& grad_gates, const Tensor& probs, const Tensor& experts,
                          const Tensor& gates, bool normalize, Tensor& grad_probs);

// out (R, F) row r = sum over k of gates[r, k] * y[slots[r, k]], skipping slot -1.
void combine_rows(const Tensor& y, const Tensor& gates, const Tensor& slots, Tensor& out);
// grad_y (S, F): row slots[r, k] = gates[r, k] * grad_out row r, rows no slot names 0;
// grad_gates (R, K) = grad_out row r . y row slots[r, k], 0 for slot -1. Either may be
// undefined (not computed). Slots are distinct (checked by the op).
void combine_rows_backward(const Tensor& grad_out, const Tensor& y, const Tensor& gates, const Tensor& slots,
                           Tensor& grad_y, Tensor& grad_gates);

}  // namespace quartet::engine::cpu

#pragma once

// Transformer kernels on host tensors the ops have checked and allocated: embedding
// lookup, layer norm over the last dim, exact GELU and causal multi-head attention.
// Every result is computed as on one thread, whatever the thread count.

#include <cstdint>
#include <span>

#include "engine/tensor.h"

namespace quartet::engine::cpu {

// ---- embedding: indices hold n whole numbers in [0, rows), checked by the op ----

// out (n, F) = the rows of weight (rows, F) that indices picks, in index order.
void embedding(const Tensor& indices, const Tensor& weight, Tensor& out);
// grad_weight (rows, F) = 0, then grad_out's row i added to row indices[i] for i in order.
void embedding_backward(const Tensor& grad_out, const Tensor& indices, Tensor& grad_weight);

// ---- layer norm: x viewed as (rows, F), F its last dim ----

// y = (x - mean) rstd weight + bias per row, the biased variance; mean and rstd (rows)
// are kept for backward. weight and bias (F) may be undefined (1 and 0).
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                        Tensor& mean, Tensor& rstd);
// Writes (overwrites) each gradient that is defined and skips the undefined ones; the
// weight and bias gradients sum over rows in row order.
void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias);

// ---- GELU, the exact form x Phi(x) ----

void gelu(const Tensor& x, Tensor& out);
// grad_in = grad_out (Phi(x) + x phi(x)).
void gelu_backward(const Tensor& grad_out, const Tensor& x, Tensor& grad_in);

// ---- attention of a block of queries on a block of keys (ring attention's steps): q,
// out (B, Tq, H * Dh); k, v (B, Tk, H * Dh); lse (B, H, Tq); visible: Tq counts,
// nondecreasing, each in [0, Tk]: query row t sees keys [0, visible[t]) ----

// Per (b, h): out_h = softmax over each row's visible keys of q_h k_h^T / sqrt(Dh), times
// v_h; lse (b, h, t) the log-sum-exp of row t's visible scaled scores. A row that sees no
// key gets out 0 and lse -inf.
void attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads,
                             std::span<const int64_t> visible, Tensor& out, Tensor& lse);
// This block's part of the gradients (all three written), given the whole attention's
// out and lse over every block a row sees: P = exp(s - lse) on the visible keys,
// dV = P^T dO, dS = P (dO v^T - rowsum(dO out)), dq = dS k / sqrt(Dh), dk = dS^T q / sqrt(Dh).
void attention_block_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, int64_t heads, std::span<const int64_t> visible,
                              Tensor& grad_q, Tensor& grad_k, Tensor& grad_v);
// Folds a block's (block_out, block_lse) into the running (out, lse) of the blocks before
// it, an online softmax: lse' = log(e^lse + e^block_lse), out' = e^(lse - lse') out +
// e^(block_lse - lse') block_out, per row; a row where block_lse is -inf keeps its own,
// one where lse is -inf takes the block's. All (B, T, H * Dh) and (B, H, T).
void attention_merge(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse, int64_t heads);

// ---- causal attention: q, k, v, out (B, T, H * Dh), lse (B, H, T); the block kernels
// with Tq = Tk = T and visible[t] = t + 1 ----

// Per (b, h): out_h = softmax(q_h k_h^T / sqrt(Dh), s <= t) v_h; lse (b, h, t) the
// log-sum-exp of row t's scaled, masked scores.
void causal_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, Tensor& out,
                              Tensor& lse);
// The gradients of q, k and v (all three written) from the probabilities recomputed
// with lse: dV = P^T dO, dS = P (dO v^T - rowsum(dO out)), dq = dS k / sqrt(Dh),
// dk = dS^T q / sqrt(Dh).
void causal_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& out, const Tensor& lse, int64_t heads, Tensor& grad_q,
                               Tensor& grad_k, Tensor& grad_v);

}  // namespace quartet::engine::cpu

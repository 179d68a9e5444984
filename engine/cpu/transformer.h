#pragma once

// Transformer kernels on host tensors the ops have checked and allocated: embedding
// lookup, layer norm over the last dim, exact GELU and causal multi-head attention.
// Every result is computed as on one thread, whatever the thread count.

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

// ---- causal attention: q, k, v, out (B, T, H * Dh), lse (B, H, T) ----

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

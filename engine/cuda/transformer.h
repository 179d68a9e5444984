#pragma once

// The CUDA twins of engine/cpu/transformer.h: embedding, layer norm over the last dim,
// exact GELU and causal attention on tensors the ops have checked and allocated on one
// cuda device. Every sum runs in a fixed order (no atomics): results repeat bit for bit.

#include "engine/tensor.h"

namespace quartet::engine::cuda {

// out (n, F) = the rows of weight (rows, F) that indices (n whole numbers) picks.
void embedding(const Tensor& indices, const Tensor& weight, Tensor& out);
// grad_weight (rows, F) = per row the sum, in index order, of the grad_out rows that
// picked it (0 for rows never picked). Reads the indices back to the host to group them.
void embedding_backward(const Tensor& grad_out, const Tensor& indices, Tensor& grad_weight);

// x viewed as (rows, F); one block per row. weight and bias (F) may be undefined.
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                        Tensor& mean, Tensor& rstd);
// Writes each gradient that is defined; weight and bias gradients sum rows in row order.
void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias);

void gelu(const Tensor& x, Tensor& out);
void gelu_backward(const Tensor& grad_out, const Tensor& x, Tensor& grad_in);

// q, k, v, out (B, T, H * Dh), lse (B, H, T). One block per query row (forward, dq)
// and per key row (dk, dv); the row's scores sit in shared memory, 8 bytes a position:
// T is bounded by the device's opt-in shared memory per block (about 29k on an H100).
void causal_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, Tensor& out,
                              Tensor& lse);
void causal_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& out, const Tensor& lse, int64_t heads, Tensor& grad_q,
                               Tensor& grad_k, Tensor& grad_v);

}  // namespace quartet::engine::cuda

#pragma once

// The CUDA twins of engine/cpu/norm.h: batch and group normalisation on tensors the ops
// have checked and allocated on one cuda device. Every per-channel or per-group sum is
// a fixed-order double reduction (segment_sum.cuh), so results repeat bit for bit.
// x / y / grad_out / grad_x: (N, C, *spatial), viewed as (N, C, L) with L the
// spatial cells (1 for (N, C) input). weight and bias (C) may be undefined (1 and 0).

#include "engine/tensor.h"

namespace quartet::engine::cuda {

// ---- batch norm: statistics per channel over N and L ----

// sums (3, C) = per channel sum of (x - shift), sum of (x - shift)^2 and the count N * L,
// over this process's batch, accumulated in double. Shifting by a value near the mean
// keeps E[(x-K)^2] - E[x-K]^2 from cancelling in the float sums. shift_by_mean: shift
// (C) is first overwritten with x's channel means (two passes, exact; for a process
// alone); otherwise shift is read as given and must be the same on every process whose
// sums are added (the running mean is).
void batch_norm_sums(const Tensor& x, bool shift_by_mean, Tensor& shift, Tensor& sums);

// From sums over the whole batch: mean, invstd (C) with the biased variance; then, per
// channel, running = (1 - momentum) running + momentum stat, with the unbiased variance
// (count / (count - 1) times, count - 1 taken as at least 1).
void batch_norm_batch_stats(const Tensor& sums, const Tensor& shift, float momentum, float eps, Tensor& mean,
                            Tensor& invstd, Tensor& running_mean, Tensor& running_var);

// mean = running_mean, invstd = 1 / sqrt(running_var + eps), for eval mode.
void batch_norm_eval_stats(const Tensor& running_mean, const Tensor& running_var, float eps, Tensor& mean,
                           Tensor& invstd);

// y = (x - mean) * invstd * weight + bias, per channel.
void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                      const Tensor& bias, Tensor& y);

// grad_sums (2, C) = per channel sum of dy and of dy * xhat over this process's batch,
// xhat = (x - mean) invstd. grad_weight and grad_bias, where defined, get the same two
// sums (overwritten): the parameter gradients of this process's batch.
void batch_norm_grad_sums(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                          Tensor& grad_sums, Tensor& grad_weight, Tensor& grad_bias);

// grad_x = weight invstd (dy - sum dy / M - xhat sum dy xhat / M) with grad_sums and the
// count M = sums[2] of the whole batch (training); weight invstd dy when grad_sums is
// undefined (eval: the statistics are constants).
void batch_norm_backward_input(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                               const Tensor& invstd, const Tensor& weight, const Tensor& grad_sums,
                               const Tensor& sums, Tensor& grad_x);

// ---- group norm: statistics per sample and group of C / groups channels ----

// y normalised per (n, group) with the biased variance, then scaled and shifted per
// channel; mean and invstd (N, groups) are kept for backward.
void group_norm_forward(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, float eps,
                        Tensor& y, Tensor& mean, Tensor& invstd);

// Writes (overwrites) each gradient that is defined and skips the undefined ones.
// ensures: results do not depend on thread scheduling (fixed summation order).
void group_norm_backward(const Tensor& grad_out, const Tensor& x, int64_t groups, const Tensor& mean,
                         const Tensor& invstd, const Tensor& weight, Tensor& grad_x, Tensor& grad_weight,
                         Tensor& grad_bias);

}  // namespace quartet::engine::cuda

#pragma once

#include <cstdint>
#include <vector>

#include "engine/tensor.h"

// Loss kernels on host tensors. Shapes, target ranges and weights are checked by the
// callers (engine/ops/loss.cpp). Class-indexed losses view logits (N, C, *spatial) as
// (N, C, S) with S the product of the spatial sizes (1 for (N, C)); targets hold one
// class per (n, s) position, index n * S + s. `loss` is a [1] tensor. Sums are taken
// in double over a fixed blocking, so results do not depend on the thread count.
namespace quartet::engine::cpu {

// probs := softmax over C; loss := inv_weight_sum * sum_i w[t_i] * nll_i, where
// w = class_weights (empty: all ones) and inv_weight_sum = 1 / sum_i w[t_i].
void cross_entropy_forward(const Tensor& logits, const std::vector<int32_t>& targets,
                           const std::vector<float>& class_weights, float inv_weight_sum,
                           Tensor& probs, Tensor& loss);
// grad_logits[n, c, s] = grad_loss * inv_weight_sum * w[t] * (probs[n, c, s] - [c == t]).
void cross_entropy_backward(const Tensor& probs, const std::vector<int32_t>& targets,
                            const std::vector<float>& class_weights, float inv_weight_sum,
                            const Tensor& grad_loss, Tensor& grad_logits);

// loss := mean of max(x, 0) - x t + log(1 + exp(-|x|)); logits and targets same shape.
void bce_with_logits_forward(const Tensor& logits, const Tensor& targets, Tensor& loss);
// grad_logits = g (sigmoid(x) - t) / numel, grad_targets = -g x / numel; either may be
// undefined (not wanted).
void bce_with_logits_backward(const Tensor& logits, const Tensor& targets, const Tensor& grad_loss,
                              Tensor& grad_logits, Tensor& grad_targets);

// loss := mean of (input - target)^2.
void mse_loss_forward(const Tensor& input, const Tensor& target, Tensor& loss);
// grad_input = 2 g (input - target) / numel = -grad_target; either may be undefined.
void mse_loss_backward(const Tensor& input, const Tensor& target, const Tensor& grad_loss,
                       Tensor& grad_input, Tensor& grad_target);

// probs := softmax over C; stats (2, G, C) := per group g and class c the Dice
// numerator 2 sum p_c t_c + smooth and denominator sum p_c + sum t_c + smooth (every
// class, scored or not); G = 1 sums over the whole batch, G = N over each sample's
// positions. loss := 1 - mean over the groups and the scored classes (c >= 1, or all
// with include_background) of numerator / denominator.
void soft_dice_forward(const Tensor& logits, const std::vector<int32_t>& targets, bool include_background,
                       float smooth, Tensor& probs, Tensor& stats, Tensor& loss);
// Gradient of the loss above through the softmax, from the saved probs and stats.
void soft_dice_backward(const Tensor& probs, const std::vector<int32_t>& targets, bool include_background,
                        const Tensor& stats, const Tensor& grad_loss, Tensor& grad_logits);

}  // namespace quartet::engine::cpu

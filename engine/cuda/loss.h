#pragma once

// The CUDA twins of engine/cpu/loss.h: loss kernels on device tensors, same names,
// signatures and results (see there for the formulas). Targets and class weights come
// as host vectors and are uploaded per call; `loss` is a [1] device tensor, written on
// the device. Sums are taken in double over a fixed grid and tree, so a loss is the
// same on every run (it may differ from the CPU's in the last bits of the double sum).
#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace quartet::engine::cuda {

void cross_entropy_forward(const Tensor& logits, const std::vector<int32_t>& targets,
                           const std::vector<float>& class_weights, float inv_weight_sum,
                           Tensor& probs, Tensor& loss);
void cross_entropy_backward(const Tensor& probs, const std::vector<int32_t>& targets,
                            const std::vector<float>& class_weights, float inv_weight_sum,
                            const Tensor& grad_loss, Tensor& grad_logits);

// grad_logits and grad_targets may each be undefined (not wanted).
void bce_with_logits_forward(const Tensor& logits, const Tensor& targets, Tensor& loss);
void bce_with_logits_backward(const Tensor& logits, const Tensor& targets, const Tensor& grad_loss,
                              Tensor& grad_logits, Tensor& grad_targets);

// grad_input and grad_target may each be undefined (not wanted).
void mse_loss_forward(const Tensor& input, const Tensor& target, Tensor& loss);
void mse_loss_backward(const Tensor& input, const Tensor& target, const Tensor& grad_loss,
                       Tensor& grad_input, Tensor& grad_target);

void soft_dice_forward(const Tensor& logits, const std::vector<int32_t>& targets, bool include_background,
                       float smooth, Tensor& probs, Tensor& stats, Tensor& loss);
void soft_dice_backward(const Tensor& probs, const std::vector<int32_t>& targets, bool include_background,
                        const Tensor& stats, const Tensor& grad_loss, Tensor& grad_logits);

}  // namespace quartet::engine::cuda

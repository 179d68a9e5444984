#pragma once

#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace quartet::engine::cpu {

// logits: (N, K); targets checked in range by the caller. Writes softmax rows to
// probs (N, K) and returns the mean negative log-likelihood.
float softmax_cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets, Tensor& probs);
// grad_logits = (probs - onehot(targets)) * grad_scale / N, grad_scale = grad_loss[0].
void softmax_cross_entropy_backward(const Tensor& probs, const std::vector<int32_t>& targets,
                                    const Tensor& grad_loss, Tensor& grad_logits);

}  // namespace quartet::engine::cpu

#pragma once

#include "engine/tensor.h"

namespace quartet::engine::cpu {

struct SgdStep {
  float lr, momentum, dampening;
  bool nesterov;
  float weight_decay;
  bool first;  // buf := g instead of the momentum update
};
// param -= lr * direction, with buf updated in place (see engine/optim.h SGD).
void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const SgdStep& s);

struct AdamStep {
  float lr, beta1, beta2, eps, weight_decay;
  bool decoupled;        // AdamW: p *= 1 - lr * wd first; else g += wd * p
  float step_size;       // lr / (1 - beta1^t)
  float bias2_sqrt;      // sqrt(1 - beta2^t)
};
// One Adam/AdamW update of param with exp_avg and exp_avg_sq in place (see engine/optim.h).
void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamStep& s);

}  // namespace quartet::engine::cpu

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

}  // namespace quartet::engine::cpu

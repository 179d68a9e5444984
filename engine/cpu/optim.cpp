#include "engine/cpu/optim.h"

#include <cmath>

namespace quartet::engine::cpu {

void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const SgdStep& s) {
  float* p = param.data();
  const float* g = grad.data();
  float* b = s.momentum != 0.0f ? buf.data() : nullptr;
  for (int64_t i = 0, n = param.numel(); i < n; ++i) {
    float d = g[i] + s.weight_decay * p[i];
    if (b) {
      b[i] = s.first ? d : s.momentum * b[i] + (1.0f - s.dampening) * d;
      d = s.nesterov ? d + s.momentum * b[i] : b[i];
    }
    p[i] -= s.lr * d;
  }
}

void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamStep& s) {
  float* p = param.data();
  const float* g = grad.data();
  float* m = exp_avg.data();
  float* v = exp_avg_sq.data();
  const float decay = s.decoupled ? 1.0f - s.lr * s.weight_decay : 1.0f;
  const float l2 = s.decoupled ? 0.0f : s.weight_decay;
  for (int64_t i = 0, n = param.numel(); i < n; ++i) {
    p[i] *= decay;
    const float d = g[i] + l2 * p[i];
    m[i] = s.beta1 * m[i] + (1.0f - s.beta1) * d;
    v[i] = s.beta2 * v[i] + (1.0f - s.beta2) * d * d;
    p[i] -= s.step_size * m[i] / (std::sqrt(v[i]) / s.bias2_sqrt + s.eps);
  }
}

}  // namespace quartet::engine::cpu

#include "engine/cpu/optim.h"

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

}  // namespace quartet::engine::cpu

#include "engine/cuda/optim.h"

#include "engine/cuda/map_reduce.cuh"
#include "engine/cuda/runtime.h"

namespace quartet::engine::cuda {
namespace {

// The CPU's sgd_loop, operation for operation; the options are uniform across threads,
// so the branches do not diverge.
struct Sgd {
  float* p;
  const float* g;
  float* b;  // null without momentum
  float lr, wd, mom, keep;
  bool decay, first, nesterov;
  __device__ void operator()(int64_t i) const {
    float d = g[i];
    if (decay) d = g[i] + wd * p[i];
    if (b) {
      const float bi = first ? d : mom * b[i] + keep * d;
      b[i] = bi;
      d = nesterov ? d + mom * bi : bi;
    }
    p[i] -= lr * d;
  }
};

// The CPU's adam_step loop body.
struct Adam {
  float* p;
  const float* g;
  float *m, *v;
  float decay, l2, beta1, beta2, eps, step_size, bias2_sqrt;
  __device__ void operator()(int64_t i) const {
    const float pi = p[i] * decay;
    const float d = g[i] + l2 * pi;
    const float mi = beta1 * m[i] + (1.0f - beta1) * d;
    const float vi = beta2 * v[i] + (1.0f - beta2) * d * d;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * mi / (sqrtf(vi) / bias2_sqrt + eps);
  }
};

}  // namespace

void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const cpu::SgdStep& s) {
  const Sgd step{param.device_data(),
                 grad.device_data(),
                 s.momentum != 0.0f ? buf.device_data() : nullptr,
                 s.lr,
                 s.weight_decay,
                 s.momentum,
                 1.0f - s.dampening,
                 s.weight_decay != 0.0f,
                 s.first,
                 s.nesterov};
  for_each(param.numel(), step, stream_of(param), "sgd_step");
}

void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const cpu::AdamStep& s) {
  const Adam step{param.device_data(),
                  grad.device_data(),
                  exp_avg.device_data(),
                  exp_avg_sq.device_data(),
                  s.decoupled ? 1.0f - s.lr * s.weight_decay : 1.0f,
                  s.decoupled ? 0.0f : s.weight_decay,
                  s.beta1,
                  s.beta2,
                  s.eps,
                  s.step_size,
                  s.bias2_sqrt};
  for_each(param.numel(), step, stream_of(param), "adam_step");
}

}  // namespace quartet::engine::cuda

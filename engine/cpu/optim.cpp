#include "engine/cpu/optim.h"

#include <omp.h>

#include <cmath>

#include "engine/threads.h"

namespace quartet::engine::cpu {

namespace {

// One SGD loop per combination of options, so that each is a branch-free loop the
// compiler vectorises; the arithmetic is the same, operation for operation.
template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_loop(float* __restrict p, const float* __restrict g, float* __restrict b, int64_t n, const SgdStep& s) {
  const float lr = s.lr, wd = s.weight_decay, mom = s.momentum, keep = 1.0f - s.dampening;
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if constexpr (kDecay) d = g[i] + wd * p[i];
    if constexpr (kMomentum) {
      const float bi = kFirst ? d : mom * b[i] + keep * d;
      b[i] = bi;
      d = kNesterov ? d + mom * bi : bi;
    }
    p[i] -= lr * d;
  }
}

template <bool kDecay>
void sgd_dispatch(float* p, const float* g, float* b, int64_t n, const SgdStep& s) {
  if (!b) return sgd_loop<kDecay, false, false, false>(p, g, b, n, s);
  if (s.first) {
    if (s.nesterov) return sgd_loop<kDecay, true, true, true>(p, g, b, n, s);
    return sgd_loop<kDecay, true, true, false>(p, g, b, n, s);
  }
  if (s.nesterov) return sgd_loop<kDecay, true, false, true>(p, g, b, n, s);
  sgd_loop<kDecay, true, false, false>(p, g, b, n, s);
}

}  // namespace

void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const SgdStep& s) {
  float* p = param.data();
  const float* g = grad.data();
  float* b = s.momentum != 0.0f ? buf.data() : nullptr;
  const int64_t n = param.numel();
  // Element-wise, so slices across threads give the same result as one thread.
  const int threads = n >= (int64_t{1} << 16) ? compute_threads() : 1;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int64_t t = omp_get_thread_num(), count = omp_get_num_threads();
    const int64_t lo = n * t / count, len = n * (t + 1) / count - lo;
    float* bt = b ? b + lo : nullptr;
    if (s.weight_decay != 0.0f) sgd_dispatch<true>(p + lo, g + lo, bt, len, s);
    else sgd_dispatch<false>(p + lo, g + lo, bt, len, s);
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

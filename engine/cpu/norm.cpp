#include "engine/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/threads.h"

namespace quartet::engine::cpu {
namespace {

// x (N, C, *spatial) as (N, C, L).
struct Planes {
  int64_t n, c, l;
  explicit Planes(const Tensor& x) : n(x.size(0)), c(x.size(1)), l(x.numel() / (x.size(0) * x.size(1))) {}
  int64_t offset(int64_t i, int64_t ch) const { return (i * c + ch) * l; }
};

// Below this many elements a loop stays on one thread.
constexpr int64_t kMinParallel = int64_t{1} << 15;

float at_or(const Tensor& t, int64_t i, float fallback) { return t.defined() ? t.data()[i] : fallback; }

}  // namespace

// ---- batch norm ----

void batch_norm_sums(const Tensor& x, bool shift_by_mean, Tensor& shift, Tensor& sums) {
  const Planes p(x);
  const float* px = x.data();
  float* pk = shift.data();
  float* ps = sums.data();
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (x.numel() > kMinParallel)
  for (int64_t c = 0; c < p.c; ++c) {
    if (shift_by_mean) {
      double s = 0.0;
      for (int64_t i = 0; i < p.n; ++i)
        for (int64_t j = 0; j < p.l; ++j) s += px[p.offset(i, c) + j];
      pk[c] = static_cast<float>(s / static_cast<double>(p.n * p.l));
    }
    const double k = pk[c];
    double s1 = 0.0, s2 = 0.0;
    for (int64_t i = 0; i < p.n; ++i) {
      const float* xp = px + p.offset(i, c);
      for (int64_t j = 0; j < p.l; ++j) {
        const double d = xp[j] - k;
        s1 += d;
        s2 += d * d;
      }
    }
    ps[c] = static_cast<float>(s1);
    ps[p.c + c] = static_cast<float>(s2);
    ps[2 * p.c + c] = static_cast<float>(p.n * p.l);
  }
}

void batch_norm_batch_stats(const Tensor& sums, const Tensor& shift, float momentum, float eps, Tensor& mean,
                            Tensor& invstd, Tensor& running_mean, Tensor& running_var) {
  const int64_t channels = mean.numel();
  const float* ps = sums.data();
  const float* pk = shift.data();
  float *pm = mean.data(), *pi = invstd.data(), *rm = running_mean.data(), *rv = running_var.data();
  for (int64_t c = 0; c < channels; ++c) {
    const double count = ps[2 * channels + c];
    const double m1 = ps[c] / count;  // mean of x - shift
    const double var = std::max(ps[channels + c] / count - m1 * m1, 0.0);
    const double mu = pk[c] + m1;
    pm[c] = static_cast<float>(mu);
    pi[c] = static_cast<float>(1.0 / std::sqrt(var + eps));
    const double unbiased = var * count / std::max(count - 1.0, 1.0);
    rm[c] = static_cast<float>((1.0 - momentum) * rm[c] + momentum * mu);
    rv[c] = static_cast<float>((1.0 - momentum) * rv[c] + momentum * unbiased);
  }
}

void batch_norm_eval_stats(const Tensor& running_mean, const Tensor& running_var, float eps, Tensor& mean,
                           Tensor& invstd) {
  const float *rm = running_mean.data(), *rv = running_var.data();
  float *pm = mean.data(), *pi = invstd.data();
  for (int64_t c = 0, n = mean.numel(); c < n; ++c) {
    pm[c] = rm[c];
    pi[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(rv[c]) + eps));
  }
}

void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                      const Tensor& bias, Tensor& y) {
  const Planes p(x);
  const float *px = x.data(), *pm = mean.data(), *pi = invstd.data();
  float* py = y.data();
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (x.numel() > kMinParallel)
  for (int64_t plane = 0; plane < p.n * p.c; ++plane) {
    const int64_t c = plane % p.c;
    const float a = pi[c] * at_or(weight, c, 1.0f);
    const float b = at_or(bias, c, 0.0f) - pm[c] * a;
    const float* xp = px + plane * p.l;
    float* yp = py + plane * p.l;
    for (int64_t j = 0; j < p.l; ++j) yp[j] = xp[j] * a + b;
  }
}

void batch_norm_grad_sums(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                          Tensor& grad_sums, Tensor& grad_weight, Tensor& grad_bias) {
  const Planes p(x);
  const float *px = x.data(), *pg = grad_out.data(), *pm = mean.data(), *pi = invstd.data();
  float* ps = grad_sums.data();
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (x.numel() > kMinParallel)
  for (int64_t c = 0; c < p.c; ++c) {
    double sum_dy = 0.0, sum_dy_xmu = 0.0;
    for (int64_t i = 0; i < p.n; ++i) {
      const float* xp = px + p.offset(i, c);
      const float* gp = pg + p.offset(i, c);
      for (int64_t j = 0; j < p.l; ++j) {
        sum_dy += gp[j];
        sum_dy_xmu += static_cast<double>(gp[j]) * (xp[j] - pm[c]);
      }
    }
    ps[c] = static_cast<float>(sum_dy);
    ps[p.c + c] = static_cast<float>(sum_dy_xmu * pi[c]);
    if (grad_bias.defined()) grad_bias.data()[c] = ps[c];
    if (grad_weight.defined()) grad_weight.data()[c] = ps[p.c + c];
  }
}

void batch_norm_backward_input(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                               const Tensor& invstd, const Tensor& weight, const Tensor& grad_sums,
                               const Tensor& sums, Tensor& grad_x) {
  const Planes p(x);
  const float *px = x.data(), *pg = grad_out.data(), *pm = mean.data(), *pi = invstd.data();
  const bool centred = grad_sums.defined();
  float* pdx = grad_x.data();
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (x.numel() > kMinParallel)
  for (int64_t plane = 0; plane < p.n * p.c; ++plane) {
    const int64_t c = plane % p.c;
    const float a = at_or(weight, c, 1.0f) * pi[c];
    const float* xp = px + plane * p.l;
    const float* gp = pg + plane * p.l;
    float* dxp = pdx + plane * p.l;
    if (!centred) {
      for (int64_t j = 0; j < p.l; ++j) dxp[j] = a * gp[j];
      continue;
    }
    const float count = sums.data()[2 * p.c + c];
    const float mean_dy = grad_sums.data()[c] / count;
    const float mean_dy_xhat = grad_sums.data()[p.c + c] / count;
    for (int64_t j = 0; j < p.l; ++j) {
      const float xhat = (xp[j] - pm[c]) * pi[c];
      dxp[j] = a * (gp[j] - mean_dy - xhat * mean_dy_xhat);
    }
  }
}

// ---- group norm ----

void group_norm_forward(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, float eps,
                        Tensor& y, Tensor& mean, Tensor& invstd) {
  const Planes p(x);
  const int64_t cg = p.c / groups, group_size = cg * p.l;
  const float* px = x.data();
  float *py = y.data(), *pm = mean.data(), *pi = invstd.data();
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (x.numel() > kMinParallel)
  for (int64_t ng = 0; ng < p.n * groups; ++ng) {
    // A group's channels are contiguous: (n, g) covers cg planes in a row.
    const float* xg = px + ng * group_size;
    double s = 0.0;
    for (int64_t j = 0; j < group_size; ++j) s += xg[j];
    const double mu = s / static_cast<double>(group_size);
    double s2 = 0.0;
    for (int64_t j = 0; j < group_size; ++j) s2 += (xg[j] - mu) * (xg[j] - mu);
    const double var = s2 / static_cast<double>(group_size);
    pm[ng] = static_cast<float>(mu);
    pi[ng] = static_cast<float>(1.0 / std::sqrt(var + eps));
    const int64_t c0 = (ng % groups) * cg;
    for (int64_t k = 0; k < cg; ++k) {
      const float a = pi[ng] * at_or(weight, c0 + k, 1.0f);
      const float b = at_or(bias, c0 + k, 0.0f) - pm[ng] * a;
      const float* xp = xg + k * p.l;
      float* yp = py + ng * group_size + k * p.l;
      for (int64_t j = 0; j < p.l; ++j) yp[j] = xp[j] * a + b;
    }
  }
}

void group_norm_backward(const Tensor& grad_out, const Tensor& x, int64_t groups, const Tensor& mean,
                         const Tensor& invstd, const Tensor& weight, Tensor& grad_x, Tensor& grad_weight,
                         Tensor& grad_bias) {
  const Planes p(x);
  const int64_t cg = p.c / groups, group_size = cg * p.l;
  const float *px = x.data(), *pg = grad_out.data(), *pm = mean.data(), *pi = invstd.data();
  // Per (n, c): sum of dy and of dy * xhat; summed over n afterwards in sample order.
  std::vector<double> plane_dy(p.n * p.c), plane_dy_xhat(p.n * p.c);
  const bool gx = grad_x.defined();
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (x.numel() > kMinParallel)
  for (int64_t ng = 0; ng < p.n * groups; ++ng) {
    const int64_t c0 = (ng % groups) * cg;
    const double mu = pm[ng], is = pi[ng];
    double a = 0.0, b = 0.0;  // sum dxhat, sum dxhat * xhat over the group
    for (int64_t k = 0; k < cg; ++k) {
      const float* xp = px + ng * group_size + k * p.l;
      const float* gp = pg + ng * group_size + k * p.l;
      double sdy = 0.0, sdy_xhat = 0.0;
      for (int64_t j = 0; j < p.l; ++j) {
        sdy += gp[j];
        sdy_xhat += gp[j] * ((xp[j] - mu) * is);
      }
      const int64_t plane = ng * cg + k;
      plane_dy[plane] = sdy;
      plane_dy_xhat[plane] = sdy_xhat;
      const double w = at_or(weight, c0 + k, 1.0f);
      a += w * sdy;
      b += w * sdy_xhat;
    }
    if (!gx) continue;
    const double mean_a = a / static_cast<double>(group_size), mean_b = b / static_cast<double>(group_size);
    for (int64_t k = 0; k < cg; ++k) {
      const float w = at_or(weight, c0 + k, 1.0f);
      const float* xp = px + ng * group_size + k * p.l;
      const float* gp = pg + ng * group_size + k * p.l;
      float* dxp = grad_x.data() + ng * group_size + k * p.l;
      for (int64_t j = 0; j < p.l; ++j) {
        const double xhat = (xp[j] - mu) * is;
        dxp[j] = static_cast<float>(is * (w * gp[j] - mean_a - xhat * mean_b));
      }
    }
  }
  for (int64_t c = 0; c < p.c; ++c) {
    double sdy = 0.0, sdy_xhat = 0.0;
    for (int64_t i = 0; i < p.n; ++i) {
      sdy += plane_dy[i * p.c + c];
      sdy_xhat += plane_dy_xhat[i * p.c + c];
    }
    if (grad_bias.defined()) grad_bias.data()[c] = static_cast<float>(sdy);
    if (grad_weight.defined()) grad_weight.data()[c] = static_cast<float>(sdy_xhat);
  }
}

}  // namespace quartet::engine::cpu

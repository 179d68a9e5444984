#include "engine/cpu/activation.h"

#include <cmath>

namespace quartet::engine::cpu {

void leaky_relu(const Tensor& x, float slope, Tensor& out) {
  const float* px = x.data();
  float* po = out.data();
  for (int64_t i = 0, n = out.numel(); i < n; ++i) po[i] = px[i] > 0.0f ? px[i] : slope * px[i];
}

void leaky_relu_backward(const Tensor& grad_out, const Tensor& x, float slope, Tensor& grad_in) {
  const float* g = grad_out.data();
  const float* px = x.data();
  float* gi = grad_in.data();
  for (int64_t i = 0, n = grad_in.numel(); i < n; ++i) gi[i] = px[i] > 0.0f ? g[i] : slope * g[i];
}

void sigmoid(const Tensor& x, Tensor& out) {
  const float* px = x.data();
  float* po = out.data();
  for (int64_t i = 0, n = out.numel(); i < n; ++i) {
    // exp of a non-positive number only: no overflow for large |x|.
    const float e = std::exp(-std::abs(px[i]));
    po[i] = px[i] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
  }
}

void sigmoid_backward(const Tensor& grad_out, const Tensor& out, Tensor& grad_in) {
  const float* g = grad_out.data();
  const float* y = out.data();
  float* gi = grad_in.data();
  for (int64_t i = 0, n = grad_in.numel(); i < n; ++i) gi[i] = g[i] * y[i] * (1.0f - y[i]);
}

void tanh(const Tensor& x, Tensor& out) {
  const float* px = x.data();
  float* po = out.data();
  for (int64_t i = 0, n = out.numel(); i < n; ++i) po[i] = std::tanh(px[i]);
}

void tanh_backward(const Tensor& grad_out, const Tensor& out, Tensor& grad_in) {
  const float* g = grad_out.data();
  const float* y = out.data();
  float* gi = grad_in.data();
  for (int64_t i = 0, n = grad_in.numel(); i < n; ++i) gi[i] = g[i] * (1.0f - y[i] * y[i]);
}

void dropout(const Tensor& x, float p, Generator& gen, Tensor& mask, Tensor& out) {
  const float keep_scale = 1.0f / (1.0f - p);
  const float* px = x.data();
  float* pm = mask.data();
  float* po = out.data();
  for (int64_t i = 0, n = out.numel(); i < n; ++i) {
    pm[i] = gen.uniform(0.0f, 1.0f) < p ? 0.0f : keep_scale;
    po[i] = px[i] * pm[i];
  }
}

}  // namespace quartet::engine::cpu

#include "engine/cpu/elementwise.h"

#include <algorithm>
#include <cstring>

namespace quartet::engine::cpu {

void fill(Tensor& out, float value) { std::fill_n(out.data(), out.numel(), value); }

void copy(const Tensor& src, Tensor& out) {
  std::memcpy(out.data(), src.data(), sizeof(float) * static_cast<size_t>(src.numel()));
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const float* pa = a.data();
  const float* pb = b.data();
  float* po = out.data();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
}

void add_(Tensor& acc, const Tensor& x, float alpha) {
  float* pa = acc.data();
  const float* px = x.data();
  const int64_t n = acc.numel();
  if (alpha == 1.0f) {
    for (int64_t i = 0; i < n; ++i) pa[i] += px[i];
  } else {
    for (int64_t i = 0; i < n; ++i) pa[i] += alpha * px[i];
  }
}

void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  const float* pa = a.data();
  const float* pb = b.data();
  float* po = out.data();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) po[i] = pa[i] * pb[i];
}

void scale(const Tensor& a, float s, Tensor& out) {
  const float* pa = a.data();
  float* po = out.data();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) po[i] = s * pa[i];
}

void relu(const Tensor& x, Tensor& out) {
  const float* px = x.data();
  float* po = out.data();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) po[i] = px[i] > 0.0f ? px[i] : 0.0f;
}

void relu_backward(const Tensor& grad_out, const Tensor& out, Tensor& grad_in) {
  const float* g = grad_out.data();
  const float* y = out.data();
  float* gi = grad_in.data();
  const int64_t n = grad_in.numel();
  for (int64_t i = 0; i < n; ++i) gi[i] = y[i] > 0.0f ? g[i] : 0.0f;
}

float sum(const Tensor& x) {
  const float* p = x.data();
  double s = 0.0;
  for (int64_t i = 0, n = x.numel(); i < n; ++i) s += p[i];
  return static_cast<float>(s);
}

double sum_squares(const Tensor& x) {
  const float* p = x.data();
  double s = 0.0;
  for (int64_t i = 0, n = x.numel(); i < n; ++i) s += static_cast<double>(p[i]) * p[i];
  return s;
}

}  // namespace quartet::engine::cpu

namespace quartet::engine::cpu {
void fill_from_scalar(const Tensor& scalar, float factor, Tensor& out) {
  std::fill_n(out.data(), out.numel(), factor * scalar.data()[0]);
}
}  // namespace quartet::engine::cpu

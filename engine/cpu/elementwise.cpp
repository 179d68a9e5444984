#include "engine/cpu/elementwise.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/cpu/slices.h"
#include "engine/threads.h"

namespace quartet::engine::cpu {

void fill(Tensor& out, float value) { std::fill_n(out.data(), out.numel(), value); }

void copy(const Tensor& src, Tensor& out) {
  std::memcpy(out.data(), src.data(), sizeof(float) * static_cast<size_t>(src.numel()));
}

// The loops take their pointers by value, so the compiler sees that stores cannot move
// them and vectorises (through a lambda's captured references it would not).
namespace {
void add_range(const float* a, const float* b, float* out, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
}
void axpy_range(float* acc, const float* x, float alpha, int64_t i0, int64_t i1) {
  if (alpha == 1.0f) {
    for (int64_t i = i0; i < i1; ++i) acc[i] += x[i];
  } else {
    for (int64_t i = i0; i < i1; ++i) acc[i] += alpha * x[i];
  }
}
void mul_range(const float* a, const float* b, float* out, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) out[i] = a[i] * b[i];
}
void scale_range(const float* a, float s, float* out, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) out[i] = s * a[i];
}
// NaN passes through, as in PyTorch (and as max pooling does, so ReLU and max pooling
// commute even there; engine::Sequential relies on that). Word w of `mask` (null: none
// wanted) gets bit b set where out[32 w + b] > 0, all that backward needs of the output.
void relu_words(const float* x, float* out, uint32_t* mask, int64_t n, int64_t w0, int64_t w1) {
  for (int64_t w = w0; w < w1; ++w) {
    const int64_t i0 = w * 32, i1 = std::min(n, i0 + 32);
    uint32_t bits = 0;
    for (int64_t i = i0; i < i1; ++i) {
      out[i] = x[i] <= 0.0f ? 0.0f : x[i];
      bits |= static_cast<uint32_t>(x[i] > 0.0f) << (i - i0);
    }
    if (mask) mask[w] = bits;
  }
}
// grad_in may be grad_out itself (relu's backward reuses a gradient nothing else sees).
void relu_backward_words(const float* g, const uint32_t* mask, float* gi, int64_t n, int64_t w0, int64_t w1) {
  for (int64_t w = w0; w < w1; ++w) {
    const int64_t i0 = w * 32, i1 = std::min(n, i0 + 32);
    const uint32_t bits = mask[w];
    for (int64_t i = i0; i < i1; ++i) gi[i] = (bits >> (i - i0)) & 1u ? g[i] : 0.0f;
  }
}
}  // namespace

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const float *pa = a.data(), *pb = b.data();
  float* po = out.data();
  for_slices(out.numel(), [=](int64_t i0, int64_t i1) { add_range(pa, pb, po, i0, i1); });
}

void add_(Tensor& acc, const Tensor& x, float alpha) {
  float* pa = acc.data();
  const float* px = x.data();
  for_slices(acc.numel(), [=](int64_t i0, int64_t i1) { axpy_range(pa, px, alpha, i0, i1); });
}

void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  const float *pa = a.data(), *pb = b.data();
  float* po = out.data();
  for_slices(out.numel(), [=](int64_t i0, int64_t i1) { mul_range(pa, pb, po, i0, i1); });
}

void scale(const Tensor& a, float s, Tensor& out) {
  const float* pa = a.data();
  float* po = out.data();
  for_slices(out.numel(), [=](int64_t i0, int64_t i1) { scale_range(pa, s, po, i0, i1); });
}

void relu(const Tensor& x, Tensor& out, Tensor& mask) {
  const float* px = x.data();
  float* po = out.data();
  uint32_t* pm = mask.defined() ? reinterpret_cast<uint32_t*>(mask.data()) : nullptr;
  const int64_t n = out.numel();
  for_slices(relu_mask_words(n), [=](int64_t w0, int64_t w1) { relu_words(px, po, pm, n, w0, w1); },
             kMinParallelElements / 32);
}

void relu_backward(const Tensor& grad_out, const Tensor& mask, Tensor& grad_in) {
  const float* g = grad_out.data();
  const uint32_t* pm = reinterpret_cast<const uint32_t*>(mask.data());
  float* gi = grad_in.data();
  const int64_t n = grad_in.numel();
  for_slices(relu_mask_words(n), [=](int64_t w0, int64_t w1) { relu_backward_words(g, pm, gi, n, w0, w1); },
             kMinParallelElements / 32);
}

float sum(const Tensor& x) {
  const float* p = x.data();
  double s = 0.0;
  for (int64_t i = 0, n = x.numel(); i < n; ++i) s += p[i];
  return static_cast<float>(s);
}

void copy_range(Tensor& dst, int64_t dst_offset, const Tensor& src, int64_t src_offset, int64_t count) {
  std::memcpy(dst.data() + dst_offset, src.data() + src_offset, sizeof(float) * static_cast<size_t>(count));
}

void fill_range(Tensor& t, int64_t offset, int64_t count, float value) { std::fill_n(t.data() + offset, count, value); }

void round_to_half(Tensor& t, int64_t offset, int64_t count) {
  float* p = t.data() + offset;
  for (int64_t i = 0; i < count; ++i) p[i] = static_cast<float>(static_cast<_Float16>(p[i]));
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

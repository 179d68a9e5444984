#include "engine/cuda/moe.h"

#include "engine/cuda/map_reduce.cuh"
#include "engine/cuda/runtime.h"

namespace quartet::engine::cuda {
namespace {

// A row's max m and sum of exp(x - m), in double: what softmax and log-sum-exp share.
__device__ void row_exp(const float* xr, int64_t f, float& m, double& s) {
  m = xr[0];
  for (int64_t j = 1; j < f; ++j) m = fmaxf(m, xr[j]);
  s = 0.0;
  for (int64_t j = 0; j < f; ++j) s += exp(static_cast<double>(xr[j]) - m);
}

// One row of f per index.
struct SoftmaxRow {
  const float* x;
  int64_t f;
  float* out;
  __device__ void operator()(int64_t r) const {
    const float* xr = x + r * f;
    float m;
    double s;
    row_exp(xr, f, m, s);
    for (int64_t j = 0; j < f; ++j) out[r * f + j] = static_cast<float>(exp(static_cast<double>(xr[j]) - m) / s);
  }
};

struct SoftmaxBackwardRow {
  const float *g, *p;
  int64_t f;
  float* d;
  __device__ void operator()(int64_t r) const {
    double dot = 0.0;
    for (int64_t j = 0; j < f; ++j) dot += static_cast<double>(g[r * f + j]) * p[r * f + j];
    for (int64_t j = 0; j < f; ++j) d[r * f + j] = static_cast<float>(p[r * f + j] * (g[r * f + j] - dot));
  }
};

struct LogsumexpRow {
  const float* x;
  int64_t f;
  float* out;
  __device__ void operator()(int64_t r) const {
    float m;
    double s;
    row_exp(x + r * f, f, m, s);
    out[r] = static_cast<float>(m + log(s));
  }
};

// One element of grad_in per index.
struct LogsumexpBackwardElement {
  const float *g, *x, *out;
  int64_t f;
  float* d;
  __device__ void operator()(int64_t i) const {
    const int64_t r = i / f;
    d[i] = static_cast<float>(g[r] * exp(static_cast<double>(x[i]) - out[r]));
  }
};

struct TopKRow {
  const float* probs;
  int64_t e, k;
  bool normalize;
  float *experts, *gates;
  __device__ void operator()(int64_t r) const {
    const float* row = probs + r * e;
    double s = 0.0;
    for (int64_t c = 0; c < k; ++c) {
      int64_t best = -1;
      for (int64_t j = 0; j < e; ++j) {
        bool taken = false;
        for (int64_t d = 0; d < c; ++d) taken = taken || static_cast<int64_t>(experts[r * k + d]) == j;
        if (!taken && (best < 0 || row[j] > row[best])) best = j;
      }
      experts[r * k + c] = static_cast<float>(best);
      gates[r * k + c] = row[best];
      s += row[best];
    }
    if (normalize)
      for (int64_t c = 0; c < k; ++c) gates[r * k + c] = static_cast<float>(gates[r * k + c] / s);
  }
};

struct TopKBackwardRow {
  const float *dg, *probs, *experts, *gates;
  int64_t e, k;
  bool normalize;
  float* d;
  __device__ void operator()(int64_t r) const {
    for (int64_t j = 0; j < e; ++j) d[r * e + j] = 0.0f;
    double dot = 0.0, s = 0.0;
    if (normalize)
      for (int64_t c = 0; c < k; ++c) {
        dot += static_cast<double>(dg[r * k + c]) * gates[r * k + c];
        s += probs[r * e + static_cast<int64_t>(experts[r * k + c])];
      }
    for (int64_t c = 0; c < k; ++c) {
      const int64_t j = static_cast<int64_t>(experts[r * k + c]);
      d[r * e + j] = normalize ? static_cast<float>((dg[r * k + c] - dot) / s) : dg[r * k + c];
    }
  }
};

// Output element i = (r, j).
struct CombineElement {
  const float *y, *gates, *slots;
  int64_t f, k;
  float* out;
  __device__ void operator()(int64_t i) const {
    const int64_t r = i / f, j = i % f;
    float acc = 0.0f;
    for (int64_t c = 0; c < k; ++c) {
      const int64_t s = static_cast<int64_t>(slots[r * k + c]);
      if (s >= 0) acc += gates[r * k + c] * y[s * f + j];
    }
    out[i] = acc;
  }
};

// grad_y element (r, c, j): slots are distinct, so each row of grad_y has one writer.
struct CombineGradY {
  const float *grad_out, *gates, *slots;
  int64_t f, k;
  float* grad_y;
  __device__ void operator()(int64_t i) const {
    const int64_t rc = i / f, j = i % f;
    const int64_t s = static_cast<int64_t>(slots[rc]);
    if (s >= 0) grad_y[s * f + j] = gates[rc] * grad_out[(rc / k) * f + j];
  }
};

struct CombineGradGates {
  const float *grad_out, *y, *slots;
  int64_t f, k;
  float* grad_gates;
  __device__ void operator()(int64_t rc) const {
    const int64_t s = static_cast<int64_t>(slots[rc]);
    double dot = 0.0;
    if (s >= 0)
      for (int64_t j = 0; j < f; ++j) dot += static_cast<double>(grad_out[(rc / k) * f + j]) * y[s * f + j];
    grad_gates[rc] = static_cast<float>(dot);
  }
};

struct Fill {
  float* p;
  __device__ void operator()(int64_t i) const { p[i] = 0.0f; }
};

}  // namespace

void softmax(const Tensor& x, Tensor& out) {
  const int64_t f = x.size(-1);
  for_each(x.numel() / f, SoftmaxRow{x.device_data(), f, out.device_data()}, stream_of(out), "softmax");
}

void softmax_backward(const Tensor& grad_out, const Tensor& p, Tensor& grad_in) {
  const int64_t f = p.size(-1);
  for_each(p.numel() / f, SoftmaxBackwardRow{grad_out.device_data(), p.device_data(), f, grad_in.device_data()},
           stream_of(grad_in), "softmax_backward");
}

void logsumexp(const Tensor& x, Tensor& out) {
  const int64_t f = x.size(-1);
  for_each(x.numel() / f, LogsumexpRow{x.device_data(), f, out.device_data()}, stream_of(out), "logsumexp");
}

void logsumexp_backward(const Tensor& grad_out, const Tensor& x, const Tensor& out, Tensor& grad_in) {
  for_each(x.numel(),
           LogsumexpBackwardElement{grad_out.device_data(), x.device_data(), out.device_data(), x.size(-1),
                                    grad_in.device_data()},
           stream_of(grad_in), "logsumexp_backward");
}

void top_k_gates(const Tensor& probs, int64_t k, bool normalize, Tensor& experts, Tensor& gates) {
  for_each(probs.size(0),
           TopKRow{probs.device_data(), probs.size(1), k, normalize, experts.device_data(), gates.device_data()},
           stream_of(gates), "top_k_gates");
}

void top_k_gates_backward(const Tensor& grad_gates, const Tensor& probs, const Tensor& experts,
                          const Tensor& gates, bool normalize, Tensor& grad_probs) {
  for_each(probs.size(0),
           TopKBackwardRow{grad_gates.device_data(), probs.device_data(), experts.device_data(), gates.device_data(),
                           probs.size(1), gates.size(1), normalize, grad_probs.device_data()},
           stream_of(grad_probs), "top_k_gates_backward");
}

void combine_rows(const Tensor& y, const Tensor& gates, const Tensor& slots, Tensor& out) {
  for_each(out.numel(),
           CombineElement{y.device_data(), gates.device_data(), slots.device_data(), out.size(1), gates.size(1),
                          out.device_data()},
           stream_of(out), "combine_rows");
}

void combine_rows_backward(const Tensor& grad_out, const Tensor& y, const Tensor& gates, const Tensor& slots,
                           Tensor& grad_y, Tensor& grad_gates) {
  const int64_t f = grad_out.size(1), k = gates.size(1);
  if (grad_y.defined()) {
    for_each(grad_y.numel(), Fill{grad_y.device_data()}, stream_of(grad_y), "combine_rows_backward");
    for_each(gates.numel() * f,
             CombineGradY{grad_out.device_data(), gates.device_data(), slots.device_data(), f, k,
                          grad_y.device_data()},
             stream_of(grad_y), "combine_rows_backward");
  }
  if (grad_gates.defined())
    for_each(gates.numel(),
             CombineGradGates{grad_out.device_data(), y.device_data(), slots.device_data(), f, k,
                              grad_gates.device_data()},
             stream_of(grad_gates), "combine_rows_backward");
}

}  // namespace quartet::engine::cuda

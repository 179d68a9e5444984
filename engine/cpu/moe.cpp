#include "engine/cpu/moe.h"

#include <algorithm>
#include <cmath>

#include "engine/cpu/slices.h"

namespace quartet::engine::cpu {
namespace {

// Rows of f elements, sliced so that a slice holds at least kMinParallelElements.
int64_t serial_rows(int64_t f) { return std::max<int64_t>(1, kMinParallelElements / std::max<int64_t>(f, 1)); }

// A row's max m and sum of exp(x - m), in double: what softmax and log-sum-exp share.
struct RowExp {
  float max;
  double sum;
};
RowExp row_exp(const float* xr, int64_t f) {
  const float m = *std::max_element(xr, xr + f);
  double s = 0.0;
  for (int64_t j = 0; j < f; ++j) s += std::exp(static_cast<double>(xr[j]) - m);
  return {m, s};
}

}  // namespace

void softmax(const Tensor& x, Tensor& out) {
  const int64_t f = x.size(-1), rows = x.numel() / f;
  const float* px = x.data();
  float* po = out.data();
  for_slices(
      rows,
      [=](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* xr = px + r * f;
          float* orow = po + r * f;
          const RowExp e = row_exp(xr, f);
          for (int64_t j = 0; j < f; ++j)
            orow[j] = static_cast<float>(std::exp(static_cast<double>(xr[j]) - e.max) / e.sum);
        }
      },
      serial_rows(f));
}

void softmax_backward(const Tensor& grad_out, const Tensor& p, Tensor& grad_in) {
  const int64_t f = p.size(-1), rows = p.numel() / f;
  const float *pg = grad_out.data(), *pp = p.data();
  float* pd = grad_in.data();
  for_slices(
      rows,
      [=](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          double dot = 0.0;
          for (int64_t j = 0; j < f; ++j) dot += static_cast<double>(pg[r * f + j]) * pp[r * f + j];
          for (int64_t j = 0; j < f; ++j)
            pd[r * f + j] = static_cast<float>(pp[r * f + j] * (pg[r * f + j] - dot));
        }
      },
      serial_rows(f));
}

void logsumexp(const Tensor& x, Tensor& out) {
  const int64_t f = x.size(-1), rows = x.numel() / f;
  const float* px = x.data();
  float* po = out.data();
  for_slices(
      rows,
      [=](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const RowExp e = row_exp(px + r * f, f);
          po[r] = static_cast<float>(e.max + std::log(e.sum));
        }
      },
      serial_rows(f));
}

void logsumexp_backward(const Tensor& grad_out, const Tensor& x, const Tensor& out, Tensor& grad_in) {
  const int64_t f = x.size(-1), rows = x.numel() / f;
  const float *pg = grad_out.data(), *px = x.data(), *po = out.data();
  float* pd = grad_in.data();
  for_slices(
      rows,
      [=](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t j = 0; j < f; ++j)
            pd[r * f + j] = static_cast<float>(pg[r] * std::exp(static_cast<double>(px[r * f + j]) - po[r]));
      },
      serial_rows(f));
}

void top_k_gates(const Tensor& probs, int64_t k, bool normalize, Tensor& experts, Tensor& gates) {
  const int64_t e = probs.size(1), rows = probs.size(0);
  const float* pp = probs.data();
  float *pe = experts.data(), *pg = gates.data();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = pp + r * e;
    double s = 0.0;
    for (int64_t c = 0; c < k; ++c) {
      // The largest not yet chosen: chosen ones are the first c entries of this row's experts.
      int64_t best = -1;
      for (int64_t j = 0; j < e; ++j) {
        bool taken = false;
        for (int64_t d = 0; d < c; ++d) taken = taken || static_cast<int64_t>(pe[r * k + d]) == j;
        if (!taken && (best < 0 || row[j] > row[best])) best = j;
      }
      pe[r * k + c] = static_cast<float>(best);
      pg[r * k + c] = row[best];
      s += row[best];
    }
    if (normalize)
      for (int64_t c = 0; c < k; ++c) pg[r * k + c] = static_cast<float>(pg[r * k + c] / s);
  }
}

void top_k_gates_backward(const Tensor& grad_gates, const Tensor& probs, const Tensor& experts,
                          const Tensor& gates, bool normalize, Tensor& grad_probs) {
  const int64_t e = probs.size(1), rows = probs.size(0), k = gates.size(1);
  const float *pdg = grad_gates.data(), *pp = probs.data(), *pe = experts.data(), *pg = gates.data();
  float* pd = grad_probs.data();
  std::fill_n(pd, grad_probs.numel(), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    // g_c = p_c / s, s = sum p: d p_c = (dg_c - sum_d dg_d g_d) / s.
    double dot = 0.0, s = 0.0;
    if (normalize)
      for (int64_t c = 0; c < k; ++c) {
        dot += static_cast<double>(pdg[r * k + c]) * pg[r * k + c];
        s += pp[r * e + static_cast<int64_t>(pe[r * k + c])];
      }
    for (int64_t c = 0; c < k; ++c) {
      const int64_t j = static_cast<int64_t>(pe[r * k + c]);
      pd[r * e + j] = normalize ? static_cast<float>((pdg[r * k + c] - dot) / s) : pdg[r * k + c];
    }
  }
}

void combine_rows(const Tensor& y, const Tensor& gates, const Tensor& slots, Tensor& out) {
  const int64_t f = out.size(1), rows = out.size(0), k = gates.size(1);
  const float *py = y.data(), *pg = gates.data(), *ps = slots.data();
  float* po = out.data();
  for_slices(
      rows,
      [=](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          float* o = po + r * f;
          std::fill_n(o, f, 0.0f);
          for (int64_t c = 0; c < k; ++c) {
            const int64_t s = static_cast<int64_t>(ps[r * k + c]);
            if (s < 0) continue;
            const float g = pg[r * k + c];
            for (int64_t j = 0; j < f; ++j) o[j] += g * py[s * f + j];
          }
        }
      },
      serial_rows(f));
}

void combine_rows_backward(const Tensor& grad_out, const Tensor& y, const Tensor& gates, const Tensor& slots,
                           Tensor& grad_y, Tensor& grad_gates) {
  const int64_t f = grad_out.size(1), rows = grad_out.size(0), k = gates.size(1);
  const float *pdo = grad_out.data(), *py = y.data(), *pg = gates.data(), *ps = slots.data();
  float* pdy = grad_y.defined() ? grad_y.data() : nullptr;
  float* pdg = grad_gates.defined() ? grad_gates.data() : nullptr;
  if (pdy) std::fill_n(pdy, grad_y.numel(), 0.0f);
  for_slices(
      rows,
      [=](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = 0; c < k; ++c) {
            const int64_t s = static_cast<int64_t>(ps[r * k + c]);
            if (s < 0) {
              if (pdg) pdg[r * k + c] = 0.0f;
              continue;
            }
            const float* d = pdo + r * f;
            if (pdy)
              for (int64_t j = 0; j < f; ++j) pdy[s * f + j] = pg[r * k + c] * d[j];
            if (pdg) {
              double dot = 0.0;
              for (int64_t j = 0; j < f; ++j) dot += static_cast<double>(d[j]) * py[s * f + j];
              pdg[r * k + c] = static_cast<float>(dot);
            }
          }
      },
      serial_rows(f * k));
}

}  // namespace quartet::engine::cpu

#include "engine/cpu/transformer.h"

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/cpu/slices.h"
#include "engine/memory.h"

namespace quartet::engine::cpu {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// One head's (T, Dh) block of a (B, T, H * Dh) tensor: rows H * Dh floats apart.
using HeadC = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using Head = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;
using Square = Eigen::Map<RowMat>;

// Rows below which a per-row loop of `features` floats stays on one thread.
int64_t serial_rows(int64_t features) { return std::max<int64_t>(1, kMinParallelElements / features); }

// ---- layer norm ----

void layer_norm_rows(const float* px, const float* w, const float* b, float eps, int64_t f, float* py, float* pm,
                     float* pr, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = px + r * f;
    double s = 0.0;
    for (int64_t j = 0; j < f; ++j) s += xr[j];
    const double mu = s / static_cast<double>(f);
    double s2 = 0.0;
    for (int64_t j = 0; j < f; ++j) s2 += (xr[j] - mu) * (xr[j] - mu);
    pm[r] = static_cast<float>(mu);
    pr[r] = static_cast<float>(1.0 / std::sqrt(s2 / static_cast<double>(f) + eps));
    float* yr = py + r * f;
    for (int64_t j = 0; j < f; ++j)
      yr[j] = (xr[j] - pm[r]) * pr[r] * (w ? w[j] : 1.0f) + (b ? b[j] : 0.0f);
  }
}

void layer_norm_grad_x_rows(const float* pg, const float* px, const float* pm, const float* pr, const float* w,
                            int64_t f, float* pdx, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float *xr = px + r * f, *gr = pg + r * f;
    const double mu = pm[r], is = pr[r];
    double a = 0.0, b = 0.0;  // sum of w dy and of w dy xhat over the row
    for (int64_t j = 0; j < f; ++j) {
      const double wdy = static_cast<double>(w ? w[j] : 1.0f) * gr[j];
      a += wdy;
      b += wdy * ((xr[j] - mu) * is);
    }
    const double mean_a = a / static_cast<double>(f), mean_b = b / static_cast<double>(f);
    float* dr = pdx + r * f;
    for (int64_t j = 0; j < f; ++j) {
      const double xhat = (xr[j] - mu) * is;
      dr[j] = static_cast<float>(is * (static_cast<double>(w ? w[j] : 1.0f) * gr[j] - mean_a - xhat * mean_b));
    }
  }
}

// Features [j0, j1): each sums over all rows in row order, so any split of the features
// gives the same bits. Rows outside, features inside: every row is read once, in order,
// and the features' sums advance side by side (vectorised), not one column at a time.
void layer_norm_grad_params(const float* pg, const float* px, const float* pm, const float* pr, int64_t rows,
                            int64_t f, float* dw, float* db, int64_t j0, int64_t j1) {
  const int64_t n = j1 - j0;
  std::vector<double> sdy(static_cast<size_t>(n), 0.0), sdy_xhat(static_cast<size_t>(n), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float *gr = pg + r * f + j0, *xr = px + r * f + j0;
    const double mu = pm[r], is = pr[r];
    for (int64_t j = 0; j < n; ++j) {
      const double dy = gr[j];
      sdy[j] += dy;
      sdy_xhat[j] += dy * ((xr[j] - mu) * is);
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    if (db) db[j0 + j] = static_cast<float>(sdy[j]);
    if (dw) dw[j0 + j] = static_cast<float>(sdy_xhat[j]);
  }
}

// ---- GELU ----

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// GELU runs sixteen values at a time through Eigen's vectorised erf (a rational
// approximation good to a few ulp, PyTorch's kind) and exp, the last chunk of a range
// zero-padded: every value takes the packet code, never the scalar one, so its result
// does not depend on where a thread's slice starts. std::erf, one value at a time, took
// a fifth of gpt-mini's step.
constexpr int64_t kChunk = 16;
using Chunk = Eigen::Array<float, kChunk, 1>;

template <class F>
void by_chunks(int64_t i0, int64_t i1, F&& f) {
  for (int64_t i = i0; i < i1; i += kChunk) f(i, std::min(kChunk, i1 - i));
}

// GCC 12 flags its own AVX-512 intrinsics' placeholder operands (_mm512_undefined_*) as
// used uninitialized once Eigen's erf and exp packets are inlined here: a known false
// positive of the compiler, not of this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

// A whole chunk is copied by a fixed-size copy (one vector move); only a range's last,
// part chunk goes through a zero-padded copy of variable length (a copy call per chunk
// once took a twentieth of gpt-mini's step).
Chunk load(const float* p, int64_t n) {
  Chunk c;
  if (n == kChunk) {
    std::memcpy(c.data(), p, sizeof(Chunk));
  } else {
    c.setZero();
    std::copy_n(p, n, c.data());
  }
  return c;
}

void store(const Chunk& c, float* p, int64_t n) {
  if (n == kChunk) std::memcpy(p, c.data(), sizeof(Chunk));
  else std::copy_n(c.data(), n, p);
}

Chunk normal_cdf(const Chunk& x) { return 0.5f * (1.0f + (x * static_cast<float>(kInvSqrt2)).erf()); }

void gelu_range(const float* px, float* po, int64_t i0, int64_t i1) {
  by_chunks(i0, i1, [&](int64_t i, int64_t n) {
    const Chunk x = load(px + i, n);
    store(x * normal_cdf(x), po + i, n);
  });
}

void gelu_backward_range(const float* g, const float* px, float* gi, int64_t i0, int64_t i1) {
  by_chunks(i0, i1, [&](int64_t i, int64_t n) {
    const Chunk x = load(px + i, n);
    const Chunk pdf = static_cast<float>(kInvSqrt2Pi) * (-0.5f * x * x).exp();
    store(load(g + i, n) * (normal_cdf(x) + x * pdf), gi + i, n);
  });
}

#pragma GCC diagnostic pop

// ---- attention ----

struct HeadGeometry {
  int64_t b, t, h, dh;
  explicit HeadGeometry(const Tensor& q, int64_t heads)
      : b(q.size(0)), t(q.size(1)), h(heads), dh(q.size(2) / heads) {}
  int64_t row() const { return h * dh; }
  // Where head bh = (b, h)'s block starts in a (B, T, H * Dh) tensor.
  int64_t offset(int64_t bh) const { return bh / h * t * row() + bh % h * dh; }
  float scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh))); }
};

HeadC head(const Tensor& x, const HeadGeometry& g, int64_t bh) {
  return HeadC(x.data() + g.offset(bh), g.t, g.dh, Eigen::OuterStride<>(g.row()));
}
Head head(Tensor& x, const HeadGeometry& g, int64_t bh) {
  return Head(x.data() + g.offset(bh), g.t, g.dh, Eigen::OuterStride<>(g.row()));
}

// Causal attention works on (T, T) score matrices in row blocks of kBlock: rows [r0, r1)
// attend to columns [0, r1) only, so the blocks right of the diagonal block, fully
// masked, are never computed (T = 128: 10 of the 16 blocks are). Within the diagonal
// block the columns past each row's own position are zeroed.
constexpr int64_t kBlock = 32;

template <class Fn>
void for_row_blocks(int64_t t, Fn&& fn) {
  for (int64_t r0 = 0; r0 < t; r0 += kBlock) fn(r0, std::min(t, r0 + kBlock));
}

// Rows [r0, r1) of s hold their scaled scores on columns [0, r1); each row t becomes its
// probabilities over columns <= t (0 after, up to r1) and lse[t] its log-sum-exp. The
// exponentials are Eigen's vectorised ones.
void causal_softmax(Square& s, int64_t r0, int64_t r1, float* lse) {
  for (int64_t t = r0; t < r1; ++t) {
    float* row = s.row(t).data();
    Eigen::Map<Eigen::ArrayXf> seen(row, t + 1);
    const float m = seen.maxCoeff();
    seen = (seen - m).exp();
    double sum = 0.0;
    for (int64_t j = 0; j <= t; ++j) sum += row[j];
    seen *= static_cast<float>(1.0 / sum);
    std::fill(row + t + 1, row + r1, 0.0f);
    lse[t] = m + static_cast<float>(std::log(sum));
  }
}

// Rows [r0, r1) of s hold their scaled scores on columns [0, r1); they become
// P = exp(s - lse[t]) on columns <= t, 0 after, up to r1.
void probabilities_from_lse(Square& s, int64_t r0, int64_t r1, const float* lse) {
  for (int64_t t = r0; t < r1; ++t) {
    float* row = s.row(t).data();
    Eigen::Map<Eigen::ArrayXf> seen(row, t + 1);
    seen = (seen - lse[t]).exp();
    std::fill(row + t + 1, row + r1, 0.0f);
  }
}

// Runs fn(bh, scratch...) for every (b, h) on the threads, `blocks` (T, T) workspace
// matrices per slice. Every slice goes to the threads, even one: Eigen stays on one
// thread inside a parallel region, so each head's products do not depend on the count.
template <class Fn>
void for_heads(const HeadGeometry& g, int blocks, Fn&& fn) {
  for_slices(
      g.b * g.h,
      [&](int64_t bh0, int64_t bh1) {
        if (bh0 == bh1) return;
        Tensor scratch = Tensor::empty({blocks, g.t, g.t}, Device::cpu(), MemTag::workspace);
        for (int64_t bh = bh0; bh < bh1; ++bh) fn(bh, scratch.data());
      },
      1);
}

}  // namespace

// ---- embedding ----

void embedding(const Tensor& indices, const Tensor& weight, Tensor& out) {
  const int64_t n = indices.numel(), f = weight.size(1);
  const float *pi = indices.data(), *pw = weight.data();
  float* po = out.data();
  for_slices(
      n,
      [=](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) std::copy_n(pw + static_cast<int64_t>(pi[i]) * f, f, po + i * f);
      },
      serial_rows(f));
}

void embedding_backward(const Tensor& grad_out, const Tensor& indices, Tensor& grad_weight) {
  const int64_t n = indices.numel(), f = grad_weight.size(1);
  const float *pi = indices.data(), *pg = grad_out.data();
  float* pw = grad_weight.data();
  std::fill_n(pw, grad_weight.numel(), 0.0f);
  // Split by feature: every element still sums its rows in index order.
  for_slices(
      f,
      [=](int64_t j0, int64_t j1) {
        for (int64_t i = 0; i < n; ++i) {
          float* dst = pw + static_cast<int64_t>(pi[i]) * f;
          const float* src = pg + i * f;
          for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
        }
      },
      std::max<int64_t>(1, kMinParallelElements / std::max<int64_t>(n, 1)));
}

// ---- layer norm ----

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                        Tensor& mean, Tensor& rstd) {
  const int64_t f = x.size(-1), rows = x.numel() / f;
  const float *px = x.data(), *pw = weight.defined() ? weight.data() : nullptr,
              *pb = bias.defined() ? bias.data() : nullptr;
  float *py = y.data(), *pm = mean.data(), *pr = rstd.data();
  for_slices(
      rows, [=](int64_t r0, int64_t r1) { layer_norm_rows(px, pw, pb, eps, f, py, pm, pr, r0, r1); },
      serial_rows(f));
}

void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) {
  const int64_t f = x.size(-1), rows = x.numel() / f;
  const float *pg = grad_out.data(), *px = x.data(), *pm = mean.data(), *pr = rstd.data();
  const float* pw = weight.defined() ? weight.data() : nullptr;
  if (grad_x.defined()) {
    float* pdx = grad_x.data();
    for_slices(
        rows, [=](int64_t r0, int64_t r1) { layer_norm_grad_x_rows(pg, px, pm, pr, pw, f, pdx, r0, r1); },
        serial_rows(f));
  }
  if (!grad_weight.defined() && !grad_bias.defined()) return;
  float* dw = grad_weight.defined() ? grad_weight.data() : nullptr;
  float* db = grad_bias.defined() ? grad_bias.data() : nullptr;
  for_slices(
      f, [=](int64_t j0, int64_t j1) { layer_norm_grad_params(pg, px, pm, pr, rows, f, dw, db, j0, j1); },
      serial_rows(rows));
}

// ---- GELU ----

void gelu(const Tensor& x, Tensor& out) {
  const float* px = x.data();
  float* po = out.data();
  for_slices(out.numel(), [=](int64_t i0, int64_t i1) { gelu_range(px, po, i0, i1); });
}

void gelu_backward(const Tensor& grad_out, const Tensor& x, Tensor& grad_in) {
  const float *g = grad_out.data(), *px = x.data();
  float* gi = grad_in.data();
  for_slices(grad_in.numel(), [=](int64_t i0, int64_t i1) { gelu_backward_range(g, px, gi, i0, i1); });
}

// ---- attention ----

void causal_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, Tensor& out,
                              Tensor& lse) {
  const HeadGeometry g(q, heads);
  float* pl = lse.data();
  for_heads(g, 1, [&](int64_t bh, float* scratch) {
    Square s(scratch, g.t, g.t);
    const HeadC qh = head(q, g, bh), kh = head(k, g, bh), vh = head(v, g, bh);
    Head oh = head(out, g, bh);
    for_row_blocks(g.t, [&](int64_t r0, int64_t r1) {
      const int64_t rows = r1 - r0;
      s.block(r0, 0, rows, r1).noalias() = g.scale() * (qh.middleRows(r0, rows) * kh.topRows(r1).transpose());
      causal_softmax(s, r0, r1, pl + bh * g.t);
      oh.middleRows(r0, rows).noalias() = s.block(r0, 0, rows, r1) * vh.topRows(r1);
    });
  });
}

void causal_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& out, const Tensor& lse, int64_t heads, Tensor& grad_q,
                               Tensor& grad_k, Tensor& grad_v) {
  const HeadGeometry g(q, heads);
  const float* pl = lse.data();
  const float scale = g.scale();
  for_heads(g, 2, [&](int64_t bh, float* scratch) {
    Square p(scratch, g.t, g.t), ds(scratch + g.t * g.t, g.t, g.t);
    const HeadC qh = head(q, g, bh), kh = head(k, g, bh), vh = head(v, g, bh), dout = head(grad_out, g, bh);
    const Eigen::VectorXf d = dout.cwiseProduct(head(out, g, bh)).rowwise().sum();
    // Row blocks: P, dP = dout V^T, dS = P (dP - d), and dQ = scale dS K.
    Head dq = head(grad_q, g, bh);
    for_row_blocks(g.t, [&](int64_t r0, int64_t r1) {
      const int64_t rows = r1 - r0;
      auto pb = p.block(r0, 0, rows, r1);
      auto sb = ds.block(r0, 0, rows, r1);
      pb.noalias() = scale * (qh.middleRows(r0, rows) * kh.topRows(r1).transpose());
      probabilities_from_lse(p, r0, r1, pl + bh * g.t);
      sb.noalias() = dout.middleRows(r0, rows) * vh.topRows(r1).transpose();
      sb = pb.cwiseProduct(sb.colwise() - d.segment(r0, rows));
      dq.middleRows(r0, rows).noalias() = scale * (sb * kh.topRows(r1));
    });
    // Column blocks: dV = P^T dout and dK = scale dS^T Q, over the rows that see them.
    Head dv = head(grad_v, g, bh), dk = head(grad_k, g, bh);
    for_row_blocks(g.t, [&](int64_t c0, int64_t c1) {
      const int64_t cols = c1 - c0, below = g.t - c0;
      dv.middleRows(c0, cols).noalias() = p.block(c0, c0, below, cols).transpose() * dout.bottomRows(below);
      dk.middleRows(c0, cols).noalias() = scale * (ds.block(c0, c0, below, cols).transpose() * qh.bottomRows(below));
    });
  });
}

}  // namespace quartet::engine::cpu

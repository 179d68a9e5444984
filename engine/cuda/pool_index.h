#pragma once

// Pooling windows as the CUDA kernels walk them, one output cell or one input cell per
// thread: the window of an output (its real cells, max with the first-winner and NaN
// rules, sum), and the outputs whose windows cover an input cell, which the backward
// passes gather from in output order so that no two threads add into one cell. No CUDA
// types: the host tests run these against engine/cpu/pool.cpp.

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cuda/hd.h"

namespace quartet::engine::cuda {

// Spatial dims right-aligned into three, as engine/cpu/pool.cpp has them: a 2-D pool is
// (1, H, W). A plane is one (n, c) of x (N, C, *in).
struct PoolGeometry {
  int64_t planes = 0;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, pad[3] = {0, 0, 0};
  int64_t in_size = 1, out_size = 1;
  float inv_cells = 1.0f;  // 1 / kernel cells, as the CPU rounds it
};

// in: x's shape (N, C, *in); out: the output's (N, C, *out); one kernel, stride and
// padding value per spatial dim.
inline PoolGeometry pool_geometry(const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                                  const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                                  const std::vector<int64_t>& padding) {
  PoolGeometry g;
  const int spatial = static_cast<int>(in.size()) - 2;
  g.planes = in[0] * in[1];
  for (int i = 0; i < spatial; ++i) {
    const int d = 3 - spatial + i;
    g.in[d] = in[2 + i];
    g.out[d] = out[2 + i];
    g.k[d] = kernel[i];
    g.stride[d] = stride[i];
    g.pad[d] = padding[i];
  }
  g.in_size = g.in[0] * g.in[1] * g.in[2];
  g.out_size = g.out[0] * g.out[1] * g.out[2];
  g.inv_cells = 1.0f / static_cast<float>(g.k[0] * g.k[1] * g.k[2]);
  return g;
}

// The kernel cells [lo, hi) of a window starting at `start` that fall inside [0, in).
QUARTET_HD void window_range(int64_t start, int64_t k, int64_t in, int64_t& lo, int64_t& hi) {
  lo = start < 0 ? -start : 0;
  hi = in - start < k ? in - start : k;
}

// The output positions [lo, hi) along one dim whose windows cover input position i:
// o * stride - pad <= i <= o * stride - pad + k - 1, 0 <= o < out.
QUARTET_HD void covering_outputs(int64_t i, int64_t k, int64_t stride, int64_t pad, int64_t out, int64_t& lo,
                                 int64_t& hi) {
  const int64_t first = i + pad - k + 1;  // smallest o * stride that still reaches i
  lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  hi = (i + pad) / stride + 1;
  if (hi > out) hi = out;
  if (lo > hi) lo = hi;
}

// Output cell o of a plane as (od, oh, ow).
QUARTET_HD void output_coords(const PoolGeometry& g, int64_t o, int64_t& od, int64_t& oh, int64_t& ow) {
  ow = o % g.out[2];
  oh = o / g.out[2] % g.out[1];
  od = o / (g.out[2] * g.out[1]);
}

// The max of output cell o's window over its real cells, xp being the plane; `arg` gets
// the winner's offset in the window, row-major over (kd, kh, kw). A cell takes over when
// it is the first, greater, or a NaN over a number: ties keep the first, the first NaN wins.
QUARTET_HD float max_pool_window(const PoolGeometry& g, const float* xp, int64_t o, int64_t& arg) {
  int64_t od, oh, ow;
  output_coords(g, o, od, oh, ow);
  const int64_t d0 = od * g.stride[0] - g.pad[0], h0 = oh * g.stride[1] - g.pad[1], w0 = ow * g.stride[2] - g.pad[2];
  int64_t kd_lo, kd_hi, kh_lo, kh_hi, kw_lo, kw_hi;
  window_range(d0, g.k[0], g.in[0], kd_lo, kd_hi);
  window_range(h0, g.k[1], g.in[1], kh_lo, kh_hi);
  window_range(w0, g.k[2], g.in[2], kw_lo, kw_hi);
  float best = -INFINITY;
  arg = -1;
  for (int64_t kd = kd_lo; kd < kd_hi; ++kd)
    for (int64_t kh = kh_lo; kh < kh_hi; ++kh) {
      const int64_t row = ((d0 + kd) * g.in[1] + h0 + kh) * g.in[2] + w0;
      for (int64_t kw = kw_lo; kw < kw_hi; ++kw) {
        const float v = xp[row + kw];
        if (arg < 0 || v > best || (v != v && best == best)) {
          best = v;
          arg = (kd * g.k[1] + kh) * g.k[2] + kw;
        }
      }
    }
  return best;
}

// The mean of output cell o's window with padded cells as zeros: the real cells summed
// in window order, times 1 / kernel cells.
QUARTET_HD float avg_pool_window(const PoolGeometry& g, const float* xp, int64_t o) {
  int64_t od, oh, ow;
  output_coords(g, o, od, oh, ow);
  const int64_t d0 = od * g.stride[0] - g.pad[0], h0 = oh * g.stride[1] - g.pad[1], w0 = ow * g.stride[2] - g.pad[2];
  int64_t kd_lo, kd_hi, kh_lo, kh_hi, kw_lo, kw_hi;
  window_range(d0, g.k[0], g.in[0], kd_lo, kd_hi);
  window_range(h0, g.k[1], g.in[1], kh_lo, kh_hi);
  window_range(w0, g.k[2], g.in[2], kw_lo, kw_hi);
  float s = 0.0f;
  for (int64_t kd = kd_lo; kd < kd_hi; ++kd)
    for (int64_t kh = kh_lo; kh < kh_hi; ++kh) {
      const int64_t row = ((d0 + kd) * g.in[1] + h0 + kh) * g.in[2] + w0;
      for (int64_t kw = kw_lo; kw < kw_hi; ++kw) s += xp[row + kw];
    }
  return s * g.inv_cells;
}

// Calls fn(o, kd, kh, kw) for each output o of a plane whose window covers input cell i,
// in increasing o (the order in which the CPU adds them), with i's offset in that window.
template <class Fn>
QUARTET_HD void for_each_covering_window(const PoolGeometry& g, int64_t i, Fn&& fn) {
  const int64_t iw = i % g.in[2], ih = i / g.in[2] % g.in[1], id = i / (g.in[2] * g.in[1]);
  int64_t d_lo, d_hi, h_lo, h_hi, w_lo, w_hi;
  covering_outputs(id, g.k[0], g.stride[0], g.pad[0], g.out[0], d_lo, d_hi);
  covering_outputs(ih, g.k[1], g.stride[1], g.pad[1], g.out[1], h_lo, h_hi);
  covering_outputs(iw, g.k[2], g.stride[2], g.pad[2], g.out[2], w_lo, w_hi);
  for (int64_t od = d_lo; od < d_hi; ++od)
    for (int64_t oh = h_lo; oh < h_hi; ++oh)
      for (int64_t ow = w_lo; ow < w_hi; ++ow)
        fn((od * g.out[1] + oh) * g.out[2] + ow, id + g.pad[0] - od * g.stride[0], ih + g.pad[1] - oh * g.stride[1],
           iw + g.pad[2] - ow * g.stride[2]);
}

// The max-pool gradient of input cell i of a plane: the sum, in output order, of the
// output gradients gp of the windows whose winner (argmax ap) is this cell.
QUARTET_HD float max_pool_input_grad(const PoolGeometry& g, const float* gp, const float* ap, int64_t i) {
  float s = 0.0f;
  for_each_covering_window(g, i, [&](int64_t o, int64_t kd, int64_t kh, int64_t kw) {
    if (static_cast<int64_t>(ap[o]) == (kd * g.k[1] + kh) * g.k[2] + kw) s += gp[o];
  });
  return s;
}

// a * b rounded on its own, as the CPU kernel's source has it (a share per window, then
// added); nvcc would otherwise fuse it into the add that follows.
QUARTET_HD float unfused_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// The avg-pool gradient of input cell i of a plane: each covering window's gradient
// times 1 / kernel cells, added in output order.
QUARTET_HD float avg_pool_input_grad(const PoolGeometry& g, const float* gp, int64_t i) {
  float s = 0.0f;
  for_each_covering_window(g, i,
                           [&](int64_t o, int64_t, int64_t, int64_t) { s += unfused_mul(gp[o], g.inv_cells); });
  return s;
}

}  // namespace quartet::engine::cuda

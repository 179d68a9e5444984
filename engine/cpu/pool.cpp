#include "engine/cpu/pool.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/cpu/simd.h"
#include "engine/threads.h"

namespace quartet::engine::cpu {
namespace {

// Spatial dims right-aligned into three: a 2D pool is (1, H, W).
struct Geometry {
  int64_t planes = 0;  // N * C
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, stride{1, 1, 1}, pad{0, 0, 0};
  int64_t in_size = 1, out_size = 1;
};

Geometry make_geometry(const Shape& in, const Shape& out, const PoolOptions& opt) {
  Geometry g;
  const int spatial = static_cast<int>(in.size()) - 2;
  g.planes = in[0] * in[1];
  for (int i = 0; i < spatial; ++i) {
    const int d = 3 - spatial + i;
    g.in[d] = in[2 + i];
    g.out[d] = out[2 + i];
    g.k[d] = opt.kernel[i];
    g.stride[d] = opt.stride[i];
    g.pad[d] = opt.padding[i];
  }
  for (int d = 0; d < 3; ++d) {
    g.in_size *= g.in[d];
    g.out_size *= g.out[d];
  }
  return g;
}

// The kernel cells [lo, hi) of a window starting at `start` that fall inside [0, in).
void window_range(int64_t start, int64_t k, int64_t in, int64_t& lo, int64_t& hi) {
  lo = std::max<int64_t>(0, -start);
  hi = std::min(k, in - start);
}

// Calls fn(output index, origin, rd, rh, rw) for every output cell of one plane: origin
// is the plane index of the window's first cell (which may lie in the padding), r* the
// kernel ranges [lo, hi) that fall on real cells.
template <class Fn>
void for_each_window(const Geometry& g, Fn&& fn) {
  for (int64_t od = 0; od < g.out[0]; ++od) {
    const int64_t d0 = od * g.stride[0] - g.pad[0];
    std::array<int64_t, 2> rd;
    window_range(d0, g.k[0], g.in[0], rd[0], rd[1]);
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
      const int64_t h0 = oh * g.stride[1] - g.pad[1];
      std::array<int64_t, 2> rh;
      window_range(h0, g.k[1], g.in[1], rh[0], rh[1]);
      for (int64_t ow = 0; ow < g.out[2]; ++ow) {
        const int64_t w0 = ow * g.stride[2] - g.pad[2];
        std::array<int64_t, 2> rw;
        window_range(w0, g.k[2], g.in[2], rw[0], rw[1]);
        // Index of the window's origin (possibly in the padding) in the plane.
        const int64_t origin = (d0 * g.in[1] + h0) * g.in[2] + w0;
        fn((od * g.out[1] + oh) * g.out[2] + ow, origin, rd, rh, rw);
      }
    }
  }
}

// Planes split across threads when there is enough work.
bool parallel_planes(const Geometry& g) { return g.planes * g.out_size > (int64_t{1} << 14); }

}  // namespace

namespace {

// The common case, 2x2 windows with stride 2 and no padding over (H, W), without the
// general loop's window ranges. Same rule: the first cell wins ties, a NaN beats numbers.
bool is_2x2_stride_2(const Geometry& g) {
  return g.in[0] == 1 && g.out[0] == 1 && g.k[1] == 2 && g.k[2] == 2 && g.stride[1] == 2 && g.stride[2] == 2 &&
         g.pad[0] == 0 && g.pad[1] == 0 && g.pad[2] == 0;
}

// One output row of n cells: r0 and r1 are the two input rows under it. A cell takes
// over unless the best so far is NaN or the cell is <= it, which is "greater, or NaN
// over a number", in window order. a may be null.
#if defined(QUARTET_SIMD)
void max_pool_2x2_row(const float* r0, const float* r1, float* y, float* a, int64_t n) {
  using namespace simd;
  constexpr int L = kSimdLanes;
  for (int64_t i = 0; i < n; i += L) {
    const int64_t m = std::min<int64_t>(L, n - i);  // outputs here, 2m inputs per row
    const Mask lo_mask = first_lanes(std::min<int64_t>(L, 2 * m)), hi_mask = first_lanes(std::max<int64_t>(0, 2 * m - L));
    const Mask out_mask = first_lanes(m);
    Vec cells[4];
    deinterleave(load(r0 + 2 * i, lo_mask), load(r0 + 2 * i + L, hi_mask), cells[0], cells[1]);
    deinterleave(load(r1 + 2 * i, lo_mask), load(r1 + 2 * i + L, hi_mask), cells[2], cells[3]);
    Vec best = cells[0], arg = zero();
    for (int c = 1; c < 4; ++c) {
      const Pred take = takes_over(cells[c], best);
      best = select(take, best, cells[c]);
      arg = select(take, arg, splat(static_cast<float>(c)));
    }
    store(y + i, out_mask, best);
    if (a) store(a + i, out_mask, arg);
  }
}
#else
void max_pool_2x2_row(const float* r0, const float* r1, float* y, float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float cells[4] = {r0[2 * i], r0[2 * i + 1], r1[2 * i], r1[2 * i + 1]};
    float best = cells[0], arg = 0.0f;
    for (int c = 1; c < 4; ++c) {
      const bool take = best == best && !(cells[c] <= best);
      best = take ? cells[c] : best;
      arg = take ? static_cast<float>(c) : arg;
    }
    y[i] = best;
    if (a) a[i] = arg;
  }
}
#endif

// The adjoint of one output row when the 2x2 windows tile the input exactly: each
// window's four cells are written (the winner gets the gradient, the others zero), so
// the input gradient needs no zeroing pass and no scatter.
#if defined(QUARTET_SIMD)
void max_pool_2x2_backward_row(const float* gy, const float* a, float* d0, float* d1, int64_t n) {
  using namespace simd;
  constexpr int L = kSimdLanes;
  for (int64_t i = 0; i < n; i += L) {
    const int64_t m = std::min<int64_t>(L, n - i);
    const Mask in_mask = first_lanes(m);
    const Mask lo_mask = first_lanes(std::min<int64_t>(L, 2 * m)), hi_mask = first_lanes(std::max<int64_t>(0, 2 * m - L));
    const Vec g = load(gy + i, in_mask), w = load(a + i, in_mask);
    Vec lo, hi;
    interleave(where_equal(w, 0.0f, g), where_equal(w, 1.0f, g), lo, hi);
    store(d0 + 2 * i, lo_mask, lo);
    store(d0 + 2 * i + L, hi_mask, hi);
    interleave(where_equal(w, 2.0f, g), where_equal(w, 3.0f, g), lo, hi);
    store(d1 + 2 * i, lo_mask, lo);
    store(d1 + 2 * i + L, hi_mask, hi);
  }
}
#else
void max_pool_2x2_backward_row(const float* gy, const float* a, float* d0, float* d1, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float w = a[i];
    d0[2 * i] = w == 0.0f ? gy[i] : 0.0f;
    d0[2 * i + 1] = w == 1.0f ? gy[i] : 0.0f;
    d1[2 * i] = w == 2.0f ? gy[i] : 0.0f;
    d1[2 * i + 1] = w == 3.0f ? gy[i] : 0.0f;
  }
}
#endif

void max_pool_2x2(const Geometry& g, const float* px, float* py, float* pa) {
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (parallel_planes(g))
  for (int64_t p = 0; p < g.planes; ++p) {
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
      const float* r0 = px + p * g.in_size + 2 * oh * g.in[2];
      const int64_t o = p * g.out_size + oh * g.out[2];
      max_pool_2x2_row(r0, r0 + g.in[2], py + o, pa ? pa + o : nullptr, g.out[2]);
    }
  }
}

}  // namespace

void max_pool_forward(const Tensor& x, const PoolOptions& opt, Tensor& out, Tensor& argmax) {
  const Geometry g = make_geometry(x.shape(), out.shape(), opt);
  const float* px = x.data();
  float* py = out.data();
  float* pa = argmax.defined() ? argmax.data() : nullptr;
  if (is_2x2_stride_2(g)) return max_pool_2x2(g, px, py, pa);
#pragma omp parallel for schedule(static) num_threads(compute_threads()) \
    if (g.planes * g.out_size > (int64_t{1} << 14))
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* xp = px + p * g.in_size;
    float* yp = py + p * g.out_size;
    float* ap = pa ? pa + p * g.out_size : nullptr;
    for (int64_t od = 0; od < g.out[0]; ++od) {
      const int64_t d0 = od * g.stride[0] - g.pad[0];
      int64_t kd_lo, kd_hi;
      window_range(d0, g.k[0], g.in[0], kd_lo, kd_hi);
      for (int64_t oh = 0; oh < g.out[1]; ++oh) {
        const int64_t h0 = oh * g.stride[1] - g.pad[1];
        int64_t kh_lo, kh_hi;
        window_range(h0, g.k[1], g.in[1], kh_lo, kh_hi);
        for (int64_t ow = 0; ow < g.out[2]; ++ow) {
          const int64_t w0 = ow * g.stride[2] - g.pad[2];
          int64_t kw_lo, kw_hi;
          window_range(w0, g.k[2], g.in[2], kw_lo, kw_hi);
          float best = -std::numeric_limits<float>::infinity();
          int64_t arg = -1;
          for (int64_t kd = kd_lo; kd < kd_hi; ++kd)
            for (int64_t kh = kh_lo; kh < kh_hi; ++kh) {
              const float* row = xp + ((d0 + kd) * g.in[1] + h0 + kh) * g.in[2];
              for (int64_t kw = kw_lo; kw < kw_hi; ++kw) {
                const float v = row[w0 + kw];
                if (arg < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
                  best = v;
                  arg = (kd * g.k[1] + kh) * g.k[2] + kw;
                }
              }
            }
          const int64_t o = (od * g.out[1] + oh) * g.out[2] + ow;
          yp[o] = best;
          if (ap) ap[o] = static_cast<float>(arg);
        }
      }
    }
  }
}

void max_pool_backward(const Tensor& grad_out, const Tensor& argmax, const PoolOptions& opt, Tensor& grad_x) {
  const Geometry g = make_geometry(grad_x.shape(), grad_out.shape(), opt);
  const float* pg = grad_out.data();
  const float* pa = argmax.data();
  float* pdx = grad_x.data();
  if (is_2x2_stride_2(g) && g.in[1] == 2 * g.out[1] && g.in[2] == 2 * g.out[2]) {
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (parallel_planes(g))
    for (int64_t p = 0; p < g.planes; ++p)
      for (int64_t oh = 0; oh < g.out[1]; ++oh) {
        const int64_t o = p * g.out_size + oh * g.out[2];
        float* d0 = pdx + p * g.in_size + 2 * oh * g.in[2];
        max_pool_2x2_backward_row(pg + o, pa + o, d0, d0 + g.in[2], g.out[2]);
      }
    return;
  }
  // Plane offset of each kernel cell from its window's origin, so the winner's cell is
  // origin + offset[argmax]: no divisions per element.
  std::vector<int64_t> offset;
  offset.reserve(static_cast<size_t>(g.k[0] * g.k[1] * g.k[2]));
  for (int64_t kd = 0; kd < g.k[0]; ++kd)
    for (int64_t kh = 0; kh < g.k[1]; ++kh)
      for (int64_t kw = 0; kw < g.k[2]; ++kw) offset.push_back((kd * g.in[1] + kh) * g.in[2] + kw);
#pragma omp parallel for schedule(static) num_threads(compute_threads()) \
    if (g.planes * g.out_size > (int64_t{1} << 14))
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* gp = pg + p * g.out_size;
    const float* ap = pa + p * g.out_size;
    float* dxp = pdx + p * g.in_size;
    std::fill_n(dxp, g.in_size, 0.0f);
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh) {
        const int64_t o0 = (od * g.out[1] + oh) * g.out[2];
        const int64_t row = ((od * g.stride[0] - g.pad[0]) * g.in[1] + oh * g.stride[1] - g.pad[1]) * g.in[2] - g.pad[2];
        for (int64_t ow = 0; ow < g.out[2]; ++ow)
          dxp[row + ow * g.stride[2] + offset[static_cast<size_t>(ap[o0 + ow])]] += gp[o0 + ow];
      }
  }
}

void avg_pool_forward(const Tensor& x, const PoolOptions& opt, Tensor& out) {
  const Geometry g = make_geometry(x.shape(), out.shape(), opt);
  const float inv_cells = 1.0f / static_cast<float>(g.k[0] * g.k[1] * g.k[2]);
  const float* px = x.data();
  float* py = out.data();
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (parallel_planes(g))
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* xp = px + p * g.in_size;
    float* yp = py + p * g.out_size;
    for_each_window(g, [&](int64_t o, int64_t origin, auto rd, auto rh, auto rw) {
      float s = 0.0f;
      for (int64_t kd = rd[0]; kd < rd[1]; ++kd)
        for (int64_t kh = rh[0]; kh < rh[1]; ++kh) {
          const int64_t row = origin + (kd * g.in[1] + kh) * g.in[2];
          for (int64_t kw = rw[0]; kw < rw[1]; ++kw) s += xp[row + kw];
        }
      yp[o] = s * inv_cells;
    });
  }
}

void avg_pool_backward(const Tensor& grad_out, const PoolOptions& opt, Tensor& grad_x) {
  const Geometry g = make_geometry(grad_x.shape(), grad_out.shape(), opt);
  const float inv_cells = 1.0f / static_cast<float>(g.k[0] * g.k[1] * g.k[2]);
  const float* pg = grad_out.data();
  float* pdx = grad_x.data();
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (parallel_planes(g))
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* gp = pg + p * g.out_size;
    float* dxp = pdx + p * g.in_size;
    std::fill_n(dxp, g.in_size, 0.0f);
    for_each_window(g, [&](int64_t o, int64_t origin, auto rd, auto rh, auto rw) {
      const float share = gp[o] * inv_cells;
      for (int64_t kd = rd[0]; kd < rd[1]; ++kd)
        for (int64_t kh = rh[0]; kh < rh[1]; ++kh) {
          const int64_t row = origin + (kd * g.in[1] + kh) * g.in[2];
          for (int64_t kw = rw[0]; kw < rw[1]; ++kw) dxp[row + kw] += share;
        }
    });
  }
}

void global_avg_pool_forward(const Tensor& x, Tensor& out) {
  const int64_t planes = out.numel(), cells = x.numel() / planes;
  const float* px = x.data();
  float* py = out.data();
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (x.numel() > (int64_t{1} << 16))
  for (int64_t p = 0; p < planes; ++p) {
    double s = 0.0;
    for (int64_t i = 0; i < cells; ++i) s += px[p * cells + i];
    py[p] = static_cast<float>(s / static_cast<double>(cells));
  }
}

void global_avg_pool_backward(const Tensor& grad_out, Tensor& grad_x) {
  const int64_t planes = grad_out.numel(), cells = grad_x.numel() / planes;
  const float* pg = grad_out.data();
  float* pdx = grad_x.data();
  const float inv_cells = 1.0f / static_cast<float>(cells);
  for (int64_t p = 0; p < planes; ++p) std::fill_n(pdx + p * cells, cells, pg[p] * inv_cells);
}

}  // namespace quartet::engine::cpu

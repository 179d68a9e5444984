#include "engine/cpu/upsample.h"

#include <algorithm>
#include <array>
#include <vector>

#include "engine/threads.h"

namespace quartet::engine::cpu {
namespace {

// Where output cell o of one dim reads: `taps` source cells index[t] with weight[t].
struct Taps {
  std::vector<int64_t> index[2];
  std::vector<float> weight[2];
};

Taps make_taps(int64_t in, int64_t out, UpsampleMode mode) {
  Taps t;
  for (int k = 0; k < 2; ++k) {
    t.index[k].resize(out);
    t.weight[k].resize(out);
  }
  const int64_t s = out / in;
  const float scale = 1.0f / static_cast<float>(s);
  for (int64_t o = 0; o < out; ++o) {
    if (mode == UpsampleMode::nearest) {
      t.index[0][o] = t.index[1][o] = o / s;
      t.weight[0][o] = 1.0f;
      t.weight[1][o] = 0.0f;
      continue;
    }
    const float src = std::max(scale * (static_cast<float>(o) + 0.5f) - 0.5f, 0.0f);
    const auto i0 = static_cast<int64_t>(src);
    const float l1 = src - static_cast<float>(i0);
    t.index[0][o] = i0;
    t.index[1][o] = i0 + (i0 < in - 1 ? 1 : 0);
    t.weight[0][o] = 1.0f - l1;
    t.weight[1][o] = l1;
  }
  return t;
}

// Spatial dims right-aligned into three: a 2D upsample is (1, H, W).
struct Geometry {
  int64_t planes = 0;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1};
  int64_t in_size = 1, out_size = 1;
  std::array<Taps, 3> taps;
  int ntaps = 1;  // 1 for nearest, 2 for linear
};

Geometry make_geometry(const Shape& in, const Shape& out, UpsampleMode mode) {
  Geometry g;
  const int spatial = static_cast<int>(in.size()) - 2;
  g.planes = in[0] * in[1];
  for (int i = 0; i < spatial; ++i) {
    g.in[3 - spatial + i] = in[2 + i];
    g.out[3 - spatial + i] = out[2 + i];
  }
  for (int d = 0; d < 3; ++d) {
    g.in_size *= g.in[d];
    g.out_size *= g.out[d];
    g.taps[d] = make_taps(g.in[d], g.out[d], mode);
  }
  g.ntaps = mode == UpsampleMode::linear ? 2 : 1;
  return g;
}

// Calls fn(output index, input index, weight) for every tap of every output cell of one
// plane, in output order.
template <class Fn>
void for_each_tap(const Geometry& g, Fn&& fn) {
  const Taps &td = g.taps[0], &th = g.taps[1], &tw = g.taps[2];
  int64_t o = 0;
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < g.out[1]; ++oh)
      for (int64_t ow = 0; ow < g.out[2]; ++ow, ++o)
        for (int a = 0; a < g.ntaps; ++a)
          for (int b = 0; b < g.ntaps; ++b) {
            const int64_t row = (td.index[a][od] * g.in[1] + th.index[b][oh]) * g.in[2];
            const float wdh = td.weight[a][od] * th.weight[b][oh];
            for (int c = 0; c < g.ntaps; ++c) fn(o, row + tw.index[c][ow], wdh * tw.weight[c][ow]);
          }
}

bool parallel_planes(const Geometry& g) { return g.planes * g.out_size > (int64_t{1} << 14); }

}  // namespace

void upsample_forward(const Tensor& x, UpsampleMode mode, Tensor& out) {
  const Geometry g = make_geometry(x.shape(), out.shape(), mode);
  const float* px = x.data();
  float* py = out.data();
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (parallel_planes(g))
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* xp = px + p * g.in_size;
    float* yp = py + p * g.out_size;
    std::fill_n(yp, g.out_size, 0.0f);
    for_each_tap(g, [&](int64_t o, int64_t i, float w) { yp[o] += w * xp[i]; });
  }
}

void upsample_backward(const Tensor& grad_out, UpsampleMode mode, Tensor& grad_x) {
  const Geometry g = make_geometry(grad_x.shape(), grad_out.shape(), mode);
  const float* pg = grad_out.data();
  float* pdx = grad_x.data();
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (parallel_planes(g))
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* gp = pg + p * g.out_size;
    float* dxp = pdx + p * g.in_size;
    std::fill_n(dxp, g.in_size, 0.0f);
    for_each_tap(g, [&](int64_t o, int64_t i, float w) { dxp[i] += w * gp[o]; });
  }
}

}  // namespace quartet::engine::cpu

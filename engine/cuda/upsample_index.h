#pragma once

// Index arithmetic of upsampling on the device, checked on the host against the CPU
// kernels by tests/engine/cuda_upsample_index_test.cpp. One plane (n, c) at a time;
// spatial dims right-aligned into three, as engine/cpu/upsample.cpp does: a 2D upsample
// is (1, H, W), a 1D one (1, 1, W).
#include <cstdint>

#include "engine/cuda/hd.h"

namespace quartet::engine::cuda {

struct UpsampleGeometry {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t in_size = 1, out_size = 1;  // cells per plane
  int taps = 1;                       // 1 nearest, 2 linear (in every dim, as on the CPU)
};

// From the shapes (N, C, *spatial) of x and out, of `rank` 3 to 5 sizes.
inline UpsampleGeometry upsample_geometry(const int64_t* in_shape, const int64_t* out_shape, int rank,
                                          bool linear) {
  UpsampleGeometry g;
  const int spatial = rank - 2;
  for (int i = 0; i < spatial; ++i) {
    g.in[3 - spatial + i] = in_shape[2 + i];
    g.out[3 - spatial + i] = out_shape[2 + i];
  }
  for (int d = 0; d < 3; ++d) {
    g.in_size *= g.in[d];
    g.out_size *= g.out[d];
  }
  g.taps = linear ? 2 : 1;
  return g;
}

// Where output cell o of one dim (in cells scaled to out) reads: index[k] with
// weight[k] for k < taps. Nearest: o / s. Linear, align_corners=false: the source
// coordinate max((o + 0.5) / s - 0.5, 0) in float, its floor and the next cell (the
// last clamped to itself), weighted 1 - frac and frac. The CPU's make_taps.
struct UpsampleTaps {
  int64_t index[2];
  float weight[2];
};

QUARTET_HD UpsampleTaps upsample_taps(int64_t o, int64_t in, int64_t out, bool linear) {
  const int64_t s = out / in;
  UpsampleTaps t;
  if (!linear) {
    t.index[0] = t.index[1] = o / s;
    t.weight[0] = 1.0f;
    t.weight[1] = 0.0f;
    return t;
  }
  const float scale = 1.0f / static_cast<float>(s);
  const float raw = scale * (static_cast<float>(o) + 0.5f) - 0.5f;
  const float src = raw < 0.0f ? 0.0f : raw;  // std::max(raw, 0.0f)
  const auto i0 = static_cast<int64_t>(src);
  const float l1 = src - static_cast<float>(i0);
  t.index[0] = i0;
  t.index[1] = i0 + (i0 < in - 1 ? 1 : 0);
  t.weight[0] = 1.0f - l1;
  t.weight[1] = l1;
  return t;
}

QUARTET_HD bool upsample_taps_read(const UpsampleTaps& t, int taps, int64_t i) {
  for (int k = 0; k < taps; ++k)
    if (t.index[k] == i) return true;
  return false;
}

// Output cells [lo, hi) of one dim that include every cell with a tap on input cell i.
// Linear taps read floor(src) and the cell after, so only cells whose source coordinate
// lies in [i - 1, i + 1) read i: inside [s (i - 1) - 1, s (i + 2) + 1) with room for
// float rounding; that window is narrowed to its first and last reader.
QUARTET_HD void upsample_readers(int64_t i, int64_t in, int64_t out, bool linear, int64_t* lo, int64_t* hi) {
  const int64_t s = out / in;
  if (!linear) {
    *lo = i * s;
    *hi = (i + 1) * s;
    return;
  }
  int64_t a = s * (i - 1) - 1, b = s * (i + 2) + 1;
  if (a < 0) a = 0;
  if (b > out) b = out;
  while (a < b && !upsample_taps_read(upsample_taps(a, in, out, true), 2, i)) ++a;
  while (b > a && !upsample_taps_read(upsample_taps(b - 1, in, out, true), 2, i)) --b;
  *lo = a;
  *hi = b;
}

// Output cell o of one plane: the sum over its taps of weight * x, from 0, in the CPU's
// order (depth taps, height taps, width taps).
QUARTET_HD float upsample_forward_at(const UpsampleGeometry& g, const float* x, int64_t o) {
  const bool linear = g.taps == 2;
  const int64_t ow = o % g.out[2], ohd = o / g.out[2], oh = ohd % g.out[1], od = ohd / g.out[1];
  const UpsampleTaps td = upsample_taps(od, g.in[0], g.out[0], linear);
  const UpsampleTaps th = upsample_taps(oh, g.in[1], g.out[1], linear);
  const UpsampleTaps tw = upsample_taps(ow, g.in[2], g.out[2], linear);
  float acc = 0.0f;
  for (int a = 0; a < g.taps; ++a)
    for (int b = 0; b < g.taps; ++b) {
      const int64_t row = (td.index[a] * g.in[1] + th.index[b]) * g.in[2];
      const float wdh = td.weight[a] * th.weight[b];
      for (int c = 0; c < g.taps; ++c) acc += wdh * tw.weight[c] * x[row + tw.index[c]];
    }
  return acc;
}

// Input cell i of one plane of the adjoint: gathers weight * grad_out over every tap that
// reads i, in the order the CPU's scatter adds them (output cells ascending, then taps),
// so no two threads write one cell.
QUARTET_HD float upsample_backward_at(const UpsampleGeometry& g, const float* grad_out, int64_t i) {
  const bool linear = g.taps == 2;
  const int64_t iw = i % g.in[2], ihd = i / g.in[2], ih = ihd % g.in[1], id = ihd / g.in[1];
  int64_t d0, d1, h0, h1, w0, w1;
  upsample_readers(id, g.in[0], g.out[0], linear, &d0, &d1);
  upsample_readers(ih, g.in[1], g.out[1], linear, &h0, &h1);
  upsample_readers(iw, g.in[2], g.out[2], linear, &w0, &w1);
  float acc = 0.0f;
  for (int64_t od = d0; od < d1; ++od) {
    const UpsampleTaps td = upsample_taps(od, g.in[0], g.out[0], linear);
    if (!upsample_taps_read(td, g.taps, id)) continue;
    for (int64_t oh = h0; oh < h1; ++oh) {
      const UpsampleTaps th = upsample_taps(oh, g.in[1], g.out[1], linear);
      if (!upsample_taps_read(th, g.taps, ih)) continue;
      for (int64_t ow = w0; ow < w1; ++ow) {
        const UpsampleTaps tw = upsample_taps(ow, g.in[2], g.out[2], linear);
        if (!upsample_taps_read(tw, g.taps, iw)) continue;
        const float go = grad_out[(od * g.out[1] + oh) * g.out[2] + ow];
        for (int a = 0; a < g.taps; ++a) {
          if (td.index[a] != id) continue;
          for (int b = 0; b < g.taps; ++b) {
            if (th.index[b] != ih) continue;
            const float wdh = td.weight[a] * th.weight[b];
            for (int c = 0; c < g.taps; ++c)
              if (tw.index[c] == iw) acc += wdh * tw.weight[c] * go;
          }
        }
      }
    }
  }
  return acc;
}

}  // namespace quartet::engine::cuda

#include "engine/cpu/winograd.h"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <array>

#include "engine/memory.h"
#include "engine/threads.h"

namespace quartet::engine::cpu {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ViewC = Eigen::Map<const RowMat>;
using View = Eigen::Map<RowMat>;

// Floats of one batch's transformed input and products, positions x (Cin + Cout) x
// tiles: 1 MiB, about one core's L2.
constexpr int64_t kBatchBudget = int64_t{1} << 18;

// Multiply-adds below which a conv runs on one thread (conv.cpp's figure).
constexpr int64_t kMinParallelWork = int64_t{1} << 20;

// The least of Cin and Cout for which Winograd is the automatic choice, 2D and 3D: below
// it the per-tile transforms cost more than the GEMMs save. quartet_kernel_bench, one
// thread, forward / input gradient, GFLOP/s im2col -> Winograd: 3D 16->32 at 32^3
// 38 -> 58 / 29 -> 49, unet3d 16->16 at 64^3 35 -> 56 / 30 -> 48, but 8->8 at 32^3
// 39 -> 36 / 33 -> 37; 2D 32->64 at 14^2 (batch 64) 43 -> 45 / 29 -> 42, batch 256
// 32 -> 39 / 32 -> 38, but 16->16 at 28^2 31 -> 24 / 27 -> 30 and 6->16 at 14^2 22 -> 18
// / 21 -> 14. 3D saves 3.4x of the multiply-adds, 2D only 2.25x.
constexpr int64_t kMinChannels2d = 32;
constexpr int64_t kMinChannels3d = 16;

// Spatial dims right-aligned into three as in conv.cpp: a 2D conv is one tile deep, its
// tiles 4x4 inputs and 2x2 outputs. The output is walked as tile rows (sample, depth
// tile, height tile), each tiles[2] tiles along the width.
struct Geometry {
  int dims = 2;
  int64_t n = 0, cin = 0, cout = 0;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, pad{0, 0, 0}, tiles{1, 1, 1};
  int64_t in_size = 1, out_size = 1;

  int depth_in() const { return dims == 3 ? 4 : 1; }   // a tile's input extent along depth
  int depth_out() const { return dims == 3 ? 2 : 1; }  // and its output extent
  int64_t positions() const { return 16 * depth_in(); }
  int64_t tile_rows() const { return n * tiles[0] * tiles[1]; }
};

// x_shape: the conv's input (N, Cin, *in); out_shape: its output (N, Cout, *out).
Geometry make_geometry(const Shape& x_shape, const Shape& out_shape, const std::array<int64_t, 3>& padding) {
  Geometry g;
  g.dims = static_cast<int>(x_shape.size()) - 2;
  g.n = x_shape[0];
  g.cin = x_shape[1];
  g.cout = out_shape[1];
  for (int i = 0; i < g.dims; ++i) {
    const int d = 3 - g.dims + i;
    g.in[d] = x_shape[2 + i];
    g.out[d] = out_shape[2 + i];
    g.pad[d] = padding[i];
    g.tiles[d] = (g.out[d] + 1) / 2;
  }
  g.in_size = g.in[0] * g.in[1] * g.in[2];
  g.out_size = g.out[0] * g.out[1] * g.out[2];
  return g;
}

std::array<int64_t, 3> padding_of(const ConvOptions& opt, int dims, bool for_input_gradient) {
  std::array<int64_t, 3> p{0, 0, 0};
  for (int i = 0; i < dims; ++i) {
    const int64_t v = opt.padding.size() == 1 ? opt.padding[0] : opt.padding[i];
    p[i] = for_input_gradient ? 2 - v : v;
  }
  return p;
}

// ---- the 1D transforms; the 2D and 3D ones apply them along each axis ----

// G (4x3) on a kernel line g read with stride s, written with stride t.
void kernel_line(const float* g, int s, float* u, int t) {
  const float a = g[0], b = g[s], c = g[2 * s];
  u[0] = a;
  u[t] = 0.5f * (a + b + c);
  u[2 * t] = 0.5f * (a - b + c);
  u[3 * t] = c;
}

// B^T (4x4) on four lines of n tiles: o = B^T a, tile by tile.
void input_lines(const float* __restrict a0, const float* __restrict a1, const float* __restrict a2,
                 const float* __restrict a3, float* __restrict o0, float* __restrict o1, float* __restrict o2,
                 float* __restrict o3, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    o0[j] = a0[j] - a2[j];
    o1[j] = a1[j] + a2[j];
    o2[j] = a2[j] - a1[j];
    o3[j] = a1[j] - a3[j];
  }
}

// A^T (2x4) on four lines of n tiles.
void output_lines(const float* __restrict m0, const float* __restrict m1, const float* __restrict m2,
                  const float* __restrict m3, float* __restrict o0, float* __restrict o1, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    o0[j] = m0[j] + m1[j] + m2[j];
    o1[j] = m1[j] - m2[j] - m3[j];
  }
}

// ---- weights: U (positions, Cout, Cin) = G g G^T per kernel ----

// flip: w is the forward conv's (Cin, Cout, 3, 3[, 3]) weight and g's conv is its input
// gradient, whose kernels are w's with the channel axes swapped and every axis reversed.
Tensor transform_weights(const float* w, const Geometry& g, bool flip) {
  const int k_size = g.dims == 3 ? 27 : 9;
  const int64_t positions = g.positions();
  MemTagScope tag(MemTag::workspace);
  Tensor u = Tensor::empty({positions, g.cout, g.cin});
  float* pu = u.data();
  for (int64_t co = 0; co < g.cout; ++co)
    for (int64_t ci = 0; ci < g.cin; ++ci) {
      std::array<float, 27> k{};
      const float* src = w + (flip ? ci * g.cout + co : co * g.cin + ci) * k_size;
      for (int i = 0; i < k_size; ++i) k[i] = src[flip ? k_size - 1 - i : i];
      // Along w, then h, then d: (3,3,3) -> (3,3,4) -> (3,4,4) -> (4,4,4).
      std::array<float, 36> a{};
      std::array<float, 48> b{};
      std::array<float, 64> t{};
      const int depth = g.dims == 3 ? 3 : 1;
      for (int r = 0; r < depth * 3; ++r) kernel_line(&k[r * 3], 1, &a[r * 4], 1);
      for (int d = 0; d < depth; ++d)
        for (int c = 0; c < 4; ++c) kernel_line(&a[d * 12 + c], 4, &b[d * 16 + c], 4);
      const float* done = b.data();
      if (g.dims == 3) {
        for (int hw = 0; hw < 16; ++hw) kernel_line(&b[hw], 16, &t[hw], 16);
        done = t.data();
      }
      for (int64_t p = 0; p < positions; ++p) pu[(p * g.cout + co) * g.cin + ci] = done[p];
    }
  return u;
}

// ---- batches of tile rows: (sample, depth tile td, height tile th), tiles[2] tiles wide ----
//
// A batch's tiles are laid out row after row, so every line below holds `cols` floats,
// one per tile: the depth and height passes run over the whole batch at once and only
// the width pass, which reads and writes the image rows, goes row by row.

// (sample, depth tile, height tile) of tile row r.
std::array<int64_t, 3> tile_row(const Geometry& g, int64_t r) {
  const int64_t per_sample = g.tiles[0] * g.tiles[1];
  return {r / per_sample, r % per_sample / g.tiles[1], r % g.tiles[1]};
}

// One thread's scratch: 128 lines of `cols` floats and two of tiles[2] + 1.
struct Scratch {
  float* lines;
  int64_t cols;
  float* even;
  float* odd;

  Scratch(float* base, int64_t cols_, int64_t tw)
      : lines(base), cols(cols_), even(base + 128 * cols_), odd(even + tw + 1) {}
  float* line(int i) const { return lines + i * cols; }
  static int64_t floats(int64_t cols, int64_t tw) { return 128 * cols + 2 * (tw + 1); }
};

// The padded input row xp[j] = row[j - pad] (zero outside [0, w)) for j < 2 (tw + 1), as
// its even and odd halves; B^T then reads a tile's four values from e[j], o[j], e[j+1],
// o[j+1], so the four transformed lines come out of plain vector loops. out[k] + offset:
// where line k of this row's tiles goes.
void input_row_lines(const float* row, int64_t w, int64_t pad, int64_t tw, const Scratch& s, float* const* out,
                     int64_t offset) {
  for (int64_t j = 0; j <= tw; ++j) {
    const int64_t i = 2 * j - pad;
    s.even[j] = i >= 0 && i < w ? row[i] : 0.0f;
    s.odd[j] = i + 1 >= 0 && i + 1 < w ? row[i + 1] : 0.0f;
  }
  const float *e = s.even, *o = s.odd;
  input_lines(e, o, e + 1, o + 1, out[0] + offset, out[1] + offset, out[2] + offset, out[3] + offset, tw);
}

// V[p] (p < positions) at v + p * pitch, t = s.cols floats: the transformed input tiles
// of tile rows [r0, r1) of input channel ci.
void transform_input(const float* px, const Geometry& g, int64_t ci, int64_t r0, int64_t r1, float* v,
                     int64_t pitch, const Scratch& s) {
  const int depth = g.depth_in();
  const int64_t tw = g.tiles[2], t = (r1 - r0) * tw;
  float* first[64];   // after the width pass: line (a, b, k), a along depth, b height, k width
  float* second[64];  // after the height pass
  for (int i = 0; i < 16 * depth; ++i) {
    first[i] = s.line(i);
    second[i] = g.dims == 3 ? s.line(64 + i) : v + i * pitch;
  }
  for (int64_t r = r0; r < r1; ++r) {
    const auto [n, td, th] = tile_row(g, r);
    const float* xc = px + (n * g.cin + ci) * g.in_size;
    for (int a = 0; a < depth; ++a)
      for (int b = 0; b < 4; ++b) {
        const int64_t id = g.dims == 3 ? 2 * td - g.pad[0] + a : 0, ih = 2 * th - g.pad[1] + b;
        float* const* out = &first[(a * 4 + b) * 4];
        if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) {
          for (int k = 0; k < 4; ++k) std::fill_n(out[k] + (r - r0) * tw, tw, 0.0f);
          continue;
        }
        input_row_lines(xc + (id * g.in[1] + ih) * g.in[2], g.in[2], g.pad[2], tw, s, out, (r - r0) * tw);
      }
  }
  for (int a = 0; a < depth; ++a)
    for (int k = 0; k < 4; ++k) {
      float* const* in = &first[a * 16 + k];
      float* const* out = &second[a * 16 + k];
      input_lines(in[0], in[4], in[8], in[12], out[0], out[4], out[8], out[12], t);
    }
  if (g.dims == 3)
    for (int bk = 0; bk < 16; ++bk)
      input_lines(second[bk], second[16 + bk], second[32 + bk], second[48 + bk], v + bk * pitch,
                  v + (16 + bk) * pitch, v + (32 + bk) * pitch, v + (48 + bk) * pitch, t);
}

// Writes the output tiles of tile rows [r0, r1) into output channel co, + bias: A^T m A
// of the products M[p] at m + p * pitch.
void transform_output(const float* m, int64_t pitch, const Geometry& g, int64_t co, int64_t r0, int64_t r1,
                      float bias, float* py, const Scratch& s) {
  const int depth = g.depth_in(), depth_out = g.depth_out();
  const int64_t tw = g.tiles[2], t = (r1 - r0) * tw, w = g.out[2];
  const float* first[64];  // after the depth pass: (a', b, k), a' < depth_out
  for (int i = 0; i < 16 * depth; ++i) first[i] = m + i * pitch;
  if (g.dims == 3)
    for (int bk = 0; bk < 16; ++bk) {
      output_lines(first[bk], first[16 + bk], first[32 + bk], first[48 + bk], s.line(bk), s.line(16 + bk), t);
      first[bk] = s.line(bk);
      first[16 + bk] = s.line(16 + bk);
    }
  for (int a = 0; a < depth_out; ++a)
    for (int k = 0; k < 4; ++k)  // height pass: lines (a', b', k) at 32 + (a' * 2 + b') * 4 + k
      output_lines(first[a * 16 + k], first[a * 16 + 4 + k], first[a * 16 + 8 + k], first[a * 16 + 12 + k],
                   s.line(32 + a * 8 + k), s.line(36 + a * 8 + k), t);
  for (int64_t r = r0; r < r1; ++r) {
    const auto [n, td, th] = tile_row(g, r);
    float* yc = py + (n * g.cout + co) * g.out_size;
    for (int a = 0; a < depth_out; ++a)
      for (int b = 0; b < 2; ++b) {
        const int64_t od = g.dims == 3 ? 2 * td + a : 0, oh = 2 * th + b;
        if (od >= g.out[0] || oh >= g.out[1]) continue;
        const int l = 32 + (a * 2 + b) * 4;
        const int64_t c = (r - r0) * tw;
        output_lines(s.line(l) + c, s.line(l + 1) + c, s.line(l + 2) + c, s.line(l + 3) + c, s.even, s.odd, tw);
        float* y = yc + (od * g.out[1] + oh) * w;
        for (int64_t j = 0; j < w / 2; ++j) {
          y[2 * j] = s.even[j] + bias;
          y[2 * j + 1] = s.odd[j] + bias;
        }
        if (w % 2) y[w - 1] = s.even[w / 2] + bias;
      }
  }
}

// ---- the conv: batches of tile rows, one thread each ----

// y (N, Cout, *out) = conv(x) + bias with the transformed weights u; bias may be null.
// A batch's outputs depend only on the batch, never on the thread that computes it.
void forward_core(const Geometry& g, const float* px, const float* pu, const float* bias, float* py) {
  const int64_t tw = g.tiles[2], positions = g.positions(), rows = g.tile_rows();
  const int64_t batch_rows = std::clamp<int64_t>(kBatchBudget / ((g.cin + g.cout) * positions * tw), 1, rows);
  const int64_t batches = (rows + batch_rows - 1) / batch_rows, cols = batch_rows * tw;
  const int threads = static_cast<int>(std::min<int64_t>(compute_threads(), batches));
  const bool parallel = threads > 1 && rows * tw * positions * g.cin * g.cout >= kMinParallelWork;
  const int slots = parallel ? threads : 1;
  const int64_t slot_floats = positions * (g.cin + g.cout) * cols + Scratch::floats(cols, tw);
  MemTagScope tag(MemTag::workspace);
  Tensor buffers = Tensor::empty({slots, slot_floats});
#pragma omp parallel for schedule(static) num_threads(slots) if (parallel)
  for (int64_t batch = 0; batch < batches; ++batch) {
    float* v = buffers.data() + omp_get_thread_num() * slot_floats;
    float* m = v + positions * g.cin * cols;
    const Scratch s(m + positions * g.cout * cols, cols, tw);
    const int64_t r0 = batch * batch_rows, r1 = std::min(rows, r0 + batch_rows), t = (r1 - r0) * tw;
    for (int64_t ci = 0; ci < g.cin; ++ci) transform_input(px, g, ci, r0, r1, v + ci * t, g.cin * t, s);
    for (int64_t p = 0; p < positions; ++p)
      View(m + p * g.cout * t, g.cout, t).noalias() =
          ViewC(pu + p * g.cout * g.cin, g.cout, g.cin) * ViewC(v + p * g.cin * t, g.cin, t);
    for (int64_t co = 0; co < g.cout; ++co)
      transform_output(m + co * t, g.cout * t, g, co, r0, r1, bias ? bias[co] : 0.0f, py, s);
  }
}

int64_t option(const std::vector<int64_t>& values, int i) { return values.size() == 1 ? values[0] : values[i]; }

}  // namespace

bool winograd_supports(const Tensor& x, const Tensor& weight, const ConvOptions& opt) {
  const int dims = x.dim() - 2;
  if (dims != 2 && dims != 3) return false;
  for (int i = 0; i < dims; ++i)
    if (weight.size(2 + i) != 3 || option(opt.stride, i) != 1 || option(opt.dilation, i) != 1 ||
        option(opt.padding, i) > 2)
      return false;
  return true;
}

bool winograd_applies(const Tensor& x, const Tensor& weight, const ConvOptions& opt) {
  const int64_t least = x.dim() == 5 ? kMinChannels3d : kMinChannels2d;
  return winograd_supports(x, weight, opt) && std::min(weight.size(0), weight.size(1)) >= least;
}

void winograd_conv_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt,
                           Tensor& out) {
  const Geometry g = make_geometry(x.shape(), out.shape(), padding_of(opt, x.dim() - 2, false));
  const Tensor u = transform_weights(weight.data(), g, false);
  forward_core(g, x.data(), u.data(), bias.defined() ? bias.data() : nullptr, out.data());
}

void winograd_conv_backward_data(const Tensor& weight, const Tensor& grad_out, const ConvOptions& opt,
                                 Tensor& grad_x) {
  const Geometry g = make_geometry(grad_out.shape(), grad_x.shape(), padding_of(opt, grad_out.dim() - 2, true));
  const Tensor u = transform_weights(weight.data(), g, true);
  forward_core(g, grad_out.data(), u.data(), nullptr, grad_x.data());
}

}  // namespace quartet::engine::cpu

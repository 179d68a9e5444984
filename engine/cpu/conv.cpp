#include "engine/cpu/conv.h"

#include <omp.h>

#include <Eigen/Core>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <array>
#include <chrono>

#include "engine/cpu/conv_kernel.h"
#include "engine/cpu/dnnl_conv.h"
#include "engine/cpu/winograd.h"
#include "engine/memory.h"
#include "engine/threads.h"

namespace quartet::engine::cpu {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;
// Row-major views with a row pitch, so a block of columns of (C, L) is a matrix too.
using ViewC = Eigen::Map<const RowMat, Eigen::Unaligned, Stride>;
using View = Eigen::Map<RowMat, Eigen::Unaligned, Stride>;

// Floats in one thread's im2col buffer; larger outputs are processed in column chunks.
// 4 MiB: bench/run's unet3d at 64^3 (one thread) trains at 1.00 samples/s with 256 KiB
// and 1 MiB buffers, 1.15 with 4 and 8 MiB and 0.84-0.99 with 16 MiB; smaller chunks
// mean narrower GEMMs and more repacking of the weights.
constexpr int64_t kColBudget = int64_t{1} << 20;

// Spatial dims right-aligned into three: a 1D conv is (1, 1, W), a 2D one (1, H, W).
// The output is walked as rows (od, oh) of out[2] columns each.
struct Geometry {
  int64_t n = 0, cin = 0, cout = 0;
  std::array<int64_t, 3> in{1, 1, 1}, k{1, 1, 1}, out{1, 1, 1};
  std::array<int64_t, 3> stride{1, 1, 1}, pad{0, 0, 0}, dil{1, 1, 1};
  int64_t in_size = 1, out_size = 1, k_size = 1;
  int64_t channel_stride = 1;  // floats between input channels: in_size, but for a depth slice's view
  bool pointwise = true;  // 1x1 kernel, stride 1, no padding: the input is its own im2col

  int64_t kdim() const { return cin * k_size; }
  int64_t rows() const { return out[0] * out[1]; }
};

// x_shape: the conv's input (N, Cin, *in); out_shape: its output (N, Cout, *out), given
// rather than derived so that a transposed conv (whose output_padding may leave extra
// input cells no window reaches) walks the same geometry.
// Fills in the sizes derived from in, k and out.
void finish_geometry(Geometry& g) {
  g.in_size = g.out_size = g.k_size = 1;
  g.pointwise = true;
  for (int d = 0; d < 3; ++d) {
    g.in_size *= g.in[d];
    g.out_size *= g.out[d];
    g.k_size *= g.k[d];
    g.pointwise = g.pointwise && g.k[d] == 1 && g.stride[d] == 1 && g.pad[d] == 0 && g.in[d] == g.out[d];
  }
  g.channel_stride = g.in_size;
}

Geometry make_geometry(const Shape& x_shape, const Shape& out_shape, const Tensor& weight,
                       const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                       const std::vector<int64_t>& dilation) {
  Geometry g;
  const int spatial = static_cast<int>(x_shape.size()) - 2;
  g.n = x_shape[0];
  g.cin = x_shape[1];
  g.cout = out_shape[1];
  for (int i = 0; i < spatial; ++i) {
    const int d = 3 - spatial + i;
    g.in[d] = x_shape[2 + i];
    g.k[d] = weight.size(2 + i);
    g.stride[d] = stride[i];
    g.pad[d] = padding[i];
    g.dil[d] = dilation[i];
    g.out[d] = out_shape[2 + i];
  }
  finish_geometry(g);
  return g;
}

// Stride 1 and no dilation along every axis: the convs that the flipped-kernel input
// gradient, the depth slices and the direct one-channel kernels handle.
bool unit_stride(const Geometry& g) {
  for (int d = 0; d < 3; ++d)
    if (g.stride[d] != 1 || g.dil[d] != 1) return false;
  return true;
}

// A conv's input gradient as a forward conv: with stride 1 and no dilation, dx is the
// conv of dy with the kernel flipped and its channel axes swapped, padded by k - 1 - pad.
// That is an im2col of dy (Cout·k rows) and one GEMM with Cin output rows, where the
// plain way is a GEMM whose inner dimension is only Cout and a col2im that adds Cin·k rows
// into dx. It pays when Cout <= Cin (quartet_kernel_bench, bwd_data, one thread, GFLOP/s
// plain -> flipped: unet3d 64^3 16->16 84 -> 93, 32->16 82 -> 124, 64->32 at 32^3 101 ->
// 139) and loses when Cout > Cin (3D stack 16->32: 107-116 -> 81-93; Cin = 1: 72 -> 11).
bool dx_by_forward_conv(const Geometry& g) {
  if (g.pointwise || g.cout > g.cin || !unit_stride(g)) return false;
  for (int d = 0; d < 3; ++d)
    if (g.pad[d] > g.k[d] - 1) return false;
  return true;
}

// The geometry of that forward conv: dy (N, Cout, *out) -> dx (N, Cin, *in).
Geometry dx_geometry(const Geometry& g) {
  Geometry t;
  t.n = g.n;
  t.cin = g.cout;
  t.cout = g.cin;
  t.in = g.out;
  t.out = g.in;
  t.k = g.k;
  for (int d = 0; d < 3; ++d) t.pad[d] = g.k[d] - 1 - g.pad[d];
  finish_geometry(t);
  return t;
}

// w (Cout, Cin, *k) -> (Cin, Cout, *k) with each kernel reversed along every axis.
Tensor flipped_weight(const float* w, const Geometry& g) {
  MemTagScope tag(MemTag::workspace);
  Tensor f = Tensor::empty({g.cin, g.cout, g.k_size});
  float* pf = f.data();
  for (int64_t co = 0; co < g.cout; ++co)
    for (int64_t ci = 0; ci < g.cin; ++ci) {
      const float* src = w + (co * g.cin + ci) * g.k_size;
      float* dst = pf + (ci * g.cout + co) * g.k_size;
      for (int64_t i = 0; i < g.k_size; ++i) dst[i] = src[g.k_size - 1 - i];
    }
  return f;
}

// Output rows per chunk so that one chunk's im2col buffer stays within kColBudget.
int64_t rows_per_chunk(const Geometry& g) {
  const int64_t per_row = std::max<int64_t>(1, g.kdim() * g.out[2]);
  return std::clamp<int64_t>(kColBudget / per_row, 1, std::max<int64_t>(1, g.rows()));
}

// Output positions o whose input position o * s + offset lies in [0, in): [lo, hi).
void valid_range(int64_t offset, int64_t s, int64_t in, int64_t out, int64_t& lo, int64_t& hi) {
  lo = offset >= 0 ? 0 : (-offset + s - 1) / s;
  hi = offset > in - 1 ? 0 : std::min(out, (in - 1 - offset) / s + 1);
  lo = std::min(lo, hi);
}

// Calls fn(d0, d1, d2, kernel row) for each kernel offset, in weight order.
template <class Fn>
void for_each_kernel_offset(const Geometry& g, Fn&& fn) {
  int64_t row = 0;
  for (int64_t c = 0; c < g.cin; ++c)
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw, ++row)
          fn(c, kd * g.dil[0] - g.pad[0], kh * g.dil[1] - g.pad[1], kw * g.dil[2] - g.pad[2], row);
}

// col (K, (r1 - r0) * out[2]) = the input patches of output rows [r0, r1); zeros where
// the kernel reads padding. x: one sample, (Cin, *in).
void im2col(const float* x, const Geometry& g, int64_t r0, int64_t r1, float* col) {
  const int64_t ow_n = g.out[2], ncols = (r1 - r0) * ow_n;
  const int64_t sw = g.stride[2];
  for_each_kernel_offset(g, [&](int64_t c, int64_t off_d, int64_t off_h, int64_t off_w, int64_t row) {
    const float* xc = x + c * g.channel_stride;
    float* dst = col + row * ncols;
    int64_t lo, hi;
    valid_range(off_w, sw, g.in[2], ow_n, lo, hi);
    for (int64_t r = r0; r < r1; ++r, dst += ow_n) {
      const int64_t id = (r / g.out[1]) * g.stride[0] + off_d;
      const int64_t ih = (r % g.out[1]) * g.stride[1] + off_h;
      if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) {
        std::fill_n(dst, ow_n, 0.0f);
        continue;
      }
      const float* src = xc + (id * g.in[1] + ih) * g.in[2];
      std::fill(dst, dst + lo, 0.0f);
      if (sw == 1) {
        std::copy(src + lo + off_w, src + hi + off_w, dst + lo);
      } else {
        for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[ow * sw + off_w];
      }
      std::fill(dst + hi, dst + ow_n, 0.0f);
    }
  });
}

// x += the patches in col, the adjoint of im2col over the same output rows.
void col2im(const float* col, const Geometry& g, int64_t r0, int64_t r1, float* x) {
  const int64_t ow_n = g.out[2], ncols = (r1 - r0) * ow_n;
  const int64_t sw = g.stride[2];
  for_each_kernel_offset(g, [&](int64_t c, int64_t off_d, int64_t off_h, int64_t off_w, int64_t row) {
    float* xc = x + c * g.channel_stride;
    const float* src = col + row * ncols;
    int64_t lo, hi;
    valid_range(off_w, sw, g.in[2], ow_n, lo, hi);
    for (int64_t r = r0; r < r1; ++r, src += ow_n) {
      const int64_t id = (r / g.out[1]) * g.stride[0] + off_d;
      const int64_t ih = (r % g.out[1]) * g.stride[1] + off_h;
      if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) continue;
      float* dst = xc + (id * g.in[1] + ih) * g.in[2];
      if (sw == 1) {
        for (int64_t ow = lo; ow < hi; ++ow) dst[ow + off_w] += src[ow];
      } else {
        for (int64_t ow = lo; ow < hi; ++ow) dst[ow * sw + off_w] += src[ow];
      }
    }
  });
}

// No two output positions read a common input cell (stride at least the dilated kernel's
// extent, as in unet3d's 2x2x2 stride-2 up-convolutions): col2im's chunks then write
// disjoint parts of dx and may run at once.
bool windows_disjoint(const Geometry& g) {
  for (int d = 0; d < 3; ++d)
    if (g.stride[d] < g.dil[d] * (g.k[d] - 1) + 1) return false;
  return true;
}

// Multiply-adds below which a conv runs on one thread: forking costs more than it saves.
constexpr int64_t kMinParallelWork = int64_t{1} << 20;

// How a conv's chunks (sample n, output rows [r0, r1)) are spread over the threads: by
// samples when there are at least as many as threads; else by chunks within each sample
// when a sample has at least as many chunks (a 3D volume at batch 1: unet3d at 64^3 on
// two threads goes from 1.7 to 2.2 samples/s, the im2col no longer running on one
// thread beside a two-thread GEMM); else one chunk at a time, each GEMM using the
// threads. fn(n, r0, r1, slot): slot < slots(), fixed per thread, and the chunks a slot
// gets depend only on the thread count, so per-slot sums are reproducible.
class ChunkLoop {
 public:
  // chunks_allowed: false when a sample's chunks write overlapping outputs (col2im).
  ChunkLoop(const Geometry& g, int64_t chunk_rows, bool chunks_allowed)
      : n_(g.n), rows_(g.rows()), chunk_(chunk_rows) {
    const int threads = compute_threads();
    const int64_t work = g.n * g.cout * g.kdim() * g.out_size;
    const int64_t chunks = (rows_ + chunk_ - 1) / chunk_;
    if (threads > 1 && work >= kMinParallelWork) {
      if (g.n >= threads) mode_ = Mode::samples;
      else if (chunks_allowed && chunks >= threads) mode_ = Mode::chunks;
    }
    slots_ = mode_ == Mode::serial ? 1 : threads;
  }
  int slots() const { return slots_; }
  bool by_chunks() const { return mode_ == Mode::chunks; }

  template <class Fn>
  void run(Fn&& fn) const {
    const int64_t chunks = (rows_ + chunk_ - 1) / chunk_;
    auto one = [&](int64_t n, int64_t c, int slot) { fn(n, c * chunk_, std::min(rows_, (c + 1) * chunk_), slot); };
    switch (mode_) {
      case Mode::samples:
#pragma omp parallel for schedule(static) num_threads(slots_)
        for (int64_t n = 0; n < n_; ++n)
          for (int64_t c = 0; c < chunks; ++c) one(n, c, omp_get_thread_num());
        break;
      case Mode::chunks:
        for (int64_t n = 0; n < n_; ++n) {
#pragma omp parallel for schedule(static) num_threads(slots_)
          for (int64_t c = 0; c < chunks; ++c) one(n, c, omp_get_thread_num());
        }
        break;
      case Mode::serial:
        for (int64_t n = 0; n < n_; ++n)
          for (int64_t c = 0; c < chunks; ++c) one(n, c, 0);
        break;
    }
  }

 private:
  enum class Mode { serial, samples, chunks };
  int64_t n_, rows_, chunk_;
  Mode mode_ = Mode::serial;
  int slots_ = 1;
};

// The columns [r0 * out[2], r1 * out[2]) of the im2col matrix of sample x: a view of x
// itself for pointwise convs, else im2col written into buf.
ViewC patches(const float* x, const Geometry& g, int64_t r0, int64_t r1, float* buf) {
  const int64_t c0 = r0 * g.out[2], nc = (r1 - r0) * g.out[2];
  if (g.pointwise) return ViewC(x + c0, g.cin, nc, Stride(g.out_size));
  im2col(x, g, r0, r1, buf);
  return ViewC(buf, g.kdim(), nc, Stride(nc));
}

// ---- 3D convolutions by depth slices ----
// With stride 1 and no dilation, input depth slice id feeds output slices id - kd + pad
// for kd < k[0]. So each input slice's 2D im2col S (Cin·kh·kw rows, one column per
// position of a slice) is built once and multiplied by the k[0] depth slices of the
// kernel stacked into one matrix (k[0]·Cout rows), and the row blocks of the product
// are added into the output slices they belong to. The plain way builds an im2col of
// Cin·k^3 rows per output chunk: k[0] times the copying, and Eigen packs every copy
// again. A thread owns a range of output slices; the k[0] - 1 input slices at each end
// of a range are built by both neighbours.
// Below this many rows in a slice's im2col the stacked GEMM is too thin to pay: the 3D
// stack's first conv (Cin = 1, 9 rows) slowed it; unet3d's first conv keeps the plain way.
constexpr int64_t kMinSliceRows = 64;

bool by_depth_slices(const Geometry& g) {
  return !g.pointwise && g.k[0] >= 2 && g.cin * g.k[1] * g.k[2] >= kMinSliceRows && unit_stride(g);
}

// One input depth slice as a 2D conv: (Cin, H, W) -> (Cout, Ho, Wo), its channels
// g.in_size apart in the volume.
Geometry slice_geometry(const Geometry& g) {
  Geometry s = g;
  s.n = 1;
  s.in[0] = s.k[0] = s.out[0] = 1;
  s.pad[0] = 0;
  finish_geometry(s);
  s.channel_stride = g.in_size;
  return s;
}

// w (Cout, Cin, kd, kh, kw) -> (k[0]·Cout, Cin·kh·kw): row block kd is W[:, :, kd].
Tensor weights_by_depth(const float* w, const Geometry& g) {
  const int64_t plane = g.k[1] * g.k[2], k2 = g.cin * plane;
  MemTagScope tag(MemTag::workspace);
  Tensor out = Tensor::empty({g.k[0] * g.cout, k2});
  float* po = out.data();
  for (int64_t kd = 0; kd < g.k[0]; ++kd)
    for (int64_t co = 0; co < g.cout; ++co)
      for (int64_t c = 0; c < g.cin; ++c)
        std::copy_n(w + ((co * g.cin + c) * g.k[0] + kd) * plane, plane, po + (kd * g.cout + co) * k2 + c * plane);
  return out;
}

// Output slices per chunk: one chunk per thread.
int64_t slices_per_chunk(const Geometry& g) {
  const int64_t t = std::max(1, compute_threads());
  return (g.out[0] + t - 1) / t;
}

// A thread's output depth slices [a, b): the input slices that feed them, and which of
// them input slice id meets at each kernel depth.
struct DepthRange {
  const Geometry& g;
  int64_t a, b;
  int64_t first_input() const { return std::max<int64_t>(0, a - g.pad[0]); }
  int64_t last_input() const { return std::min<int64_t>(g.in[0] - 1, b - 1 - g.pad[0] + g.k[0] - 1); }
  // The output slice input slice id meets at kernel depth kd, or -1 outside [a, b).
  int64_t output(int64_t id, int64_t kd) const {
    const int64_t od = id - kd + g.pad[0];
    return od >= a && od < b ? od : -1;
  }
};

// Rows of a slice's output per piece: a slice's im2col is built in pieces of at most
// kColBudget floats (a 256^3 volume's slice of 288 rows would take 72 MiB), split evenly.
int64_t slice_piece_rows(const Geometry& sg) {
  const int64_t pieces = (sg.out[1] + rows_per_chunk(sg) - 1) / rows_per_chunk(sg);
  return (sg.out[1] + pieces - 1) / pieces;
}

// For each input slice of sample xn that feeds `range`, piece by piece: builds the
// piece's im2col (K2 rows, nc columns from column c0 of the slice) into col, then calls
// fn(id, c0, nc).
template <class Fn>
void for_each_slice_piece(const Geometry& g, const Geometry& sg, int64_t piece, const float* xn,
                          const DepthRange& range, float* col, Fn&& fn) {
  for (int64_t id = range.first_input(); id <= range.last_input(); ++id) {
    const float* slice = xn + id * g.in[1] * g.in[2];
    for (int64_t h0 = 0; h0 < sg.out[1]; h0 += piece) {
      const int64_t h1 = std::min(sg.out[1], h0 + piece);
      im2col(slice, sg, h0, h1, col);
      fn(id, h0 * sg.out[2], (h1 - h0) * sg.out[2]);
    }
  }
}

void forward_by_slices(const Geometry& g, const float* px, const float* pw, const float* bias, float* py) {
  const Geometry sg = slice_geometry(g);
  const int64_t L = g.out_size, K2 = sg.kdim(), HW = sg.out_size, per = slices_per_chunk(g);
  const int64_t piece = slice_piece_rows(sg), piece_cols = piece * sg.out[2], rows = g.k[0] * g.cout;
  const ChunkLoop loop(g, per * g.out[1], true);
  const Tensor wk = weights_by_depth(pw, g);
  MemTagScope tag(MemTag::workspace);
  const int64_t slot_floats = (K2 + rows) * piece_cols;
  Tensor buffers = Tensor::empty({loop.slots(), slot_floats});
  const ViewC w(wk.data(), rows, K2, Stride(K2));
  loop.run([&](int64_t n, int64_t r0, int64_t r1, int slot) {
    const DepthRange range{g, r0 / g.out[1], r1 / g.out[1]};
    float* col = buffers.data() + slot * slot_floats;
    float* z = col + K2 * piece_cols;
    float* yn = py + n * g.cout * L;
    for (int64_t od = range.a; od < range.b; ++od) View(yn + od * HW, g.cout, HW, Stride(L)).setZero();
    for_each_slice_piece(g, sg, piece, px + n * g.cin * g.in_size, range, col, [&](int64_t id, int64_t c0, int64_t nc) {
      View(z, rows, nc, Stride(nc)).noalias() = w * ViewC(col, K2, nc, Stride(nc));
      for (int64_t kd = 0; kd < g.k[0]; ++kd) {
        const int64_t od = range.output(id, kd);
        if (od >= 0)
          View(yn + od * HW + c0, g.cout, nc, Stride(L)) += ViewC(z + kd * g.cout * nc, g.cout, nc, Stride(nc));
      }
    });
    if (bias)
      for (int64_t od = range.a; od < range.b; ++od)
        View(yn + od * HW, g.cout, HW, Stride(L)).colwise() += Eigen::Map<const Eigen::VectorXf>(bias, g.cout);
  });
}

// dw (like W) = sum over samples of dy col(x)^T, overwritten: per input slice, the k[0]
// output-gradient slices it meets, stacked, times its im2col transposed. Summed per
// thread, the threads' sums added in thread order.
void weight_grad_by_slices(const Geometry& g, const float* px, const float* pdy, float* pdw) {
  const Geometry sg = slice_geometry(g);
  const int64_t L = g.out_size, K2 = sg.kdim(), HW = sg.out_size, per = slices_per_chunk(g);
  const int64_t piece = slice_piece_rows(sg), piece_cols = piece * sg.out[2];
  const int64_t rows = g.k[0] * g.cout, per_slot = rows * K2;
  const ChunkLoop loop(g, per * g.out[1], true);
  MemTagScope tag(MemTag::workspace);
  const int64_t slot_floats = (K2 + rows) * piece_cols;
  Tensor buffers = Tensor::empty({loop.slots(), slot_floats});
  Tensor partials = Tensor::zeros({loop.slots(), per_slot});
  loop.run([&](int64_t n, int64_t r0, int64_t r1, int slot) {
    const DepthRange range{g, r0 / g.out[1], r1 / g.out[1]};
    float* col = buffers.data() + slot * slot_floats;
    float* dys = col + K2 * piece_cols;
    const float* dyn = pdy + n * g.cout * L;
    View dw(partials.data() + slot * per_slot, rows, K2, Stride(K2));
    for_each_slice_piece(g, sg, piece, px + n * g.cin * g.in_size, range, col, [&](int64_t id, int64_t c0, int64_t nc) {
      for (int64_t kd = 0; kd < g.k[0]; ++kd) {
        const int64_t od = range.output(id, kd);
        View block(dys + kd * g.cout * nc, g.cout, nc, Stride(nc));
        if (od >= 0) block = ViewC(dyn + od * HW + c0, g.cout, nc, Stride(L));
        else block.setZero();
      }
      dw.noalias() += ViewC(dys, rows, nc, Stride(nc)) * ViewC(col, K2, nc, Stride(nc)).transpose();
    });
  });
  Eigen::Map<Eigen::VectorXf> total(partials.data(), per_slot);
  for (int s = 1; s < loop.slots(); ++s)
    total += Eigen::Map<const Eigen::VectorXf>(partials.data() + s * per_slot, per_slot);
  // (kd, Cout, Cin·kh·kw) -> (Cout, Cin, kd, kh, kw)
  const int64_t plane = g.k[1] * g.k[2];
  for (int64_t kd = 0; kd < g.k[0]; ++kd)
    for (int64_t co = 0; co < g.cout; ++co)
      for (int64_t c = 0; c < g.cin; ++c)
        std::copy_n(partials.data() + (kd * g.cout + co) * K2 + c * plane, plane,
                    pdw + ((co * g.cin + c) * g.k[0] + kd) * plane);
}

// ---- One input channel: direct convolution ----
//
// A conv with one input channel (a network's first layer on an image or a volume:
// lenet5's 1->6 5x5, cnn's 1->32 3x3, the 3D stack's and unet3d's 1->16 3^3) makes an
// im2col of only k rows, copying every input value k times, and then a GEMM with Cout
// rows and an inner dimension of k, which Eigen's 48-row kernel mostly wastes. Here
// each output row is computed from a zero-padded copy of the input: k shifted input
// rows, each multiplied by one weight per output channel, vectorised along the row,
// eight output channels at a time. The weight gradient reads the same shifted rows
// against the output gradient, one output channel per thread, so it does not depend on
// the thread count. For the kernel shapes below, stride 1 and no dilation; other
// one-channel convs keep im2col.

bool direct_single_channel(const Geometry& g) {
  if (g.cin != 1 || g.channel_stride != g.in_size || !unit_stride(g)) return false;
  const std::array<int64_t, 3>& k = g.k;
  return (k[0] == 1 && k[1] == 3 && k[2] == 3) || (k[0] == 1 && k[1] == 5 && k[2] == 5) ||
         (k[0] == 3 && k[1] == 3 && k[2] == 3);
}

// The input zero-padded by g.pad on every side, one sample after another.
struct PaddedInput {
  Tensor data;
  int64_t row = 0, plane = 0, sample = 0;  // floats between rows, depth slices, samples

  PaddedInput(const Geometry& g, const float* px) {
    const int64_t p0 = g.in[0] + 2 * g.pad[0], p1 = g.in[1] + 2 * g.pad[1];
    row = g.in[2] + 2 * g.pad[2];
    plane = p1 * row;
    sample = p0 * plane;
    MemTagScope tag(MemTag::workspace);
    data = Tensor::zeros({g.n, sample});
    float* base = data.data();
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (g.n > 1 && g.n * g.in_size > (1 << 16))
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t d = 0; d < g.in[0]; ++d)
        for (int64_t h = 0; h < g.in[1]; ++h)
          std::copy_n(px + (n * g.in[0] + d) * g.in[1] * g.in[2] + h * g.in[2], g.in[2],
                      base + n * sample + (d + g.pad[0]) * plane + (h + g.pad[1]) * row + g.pad[2]);
  }
};

// Output channels [0, CB) of one output row: y[j][ow] = bias[j] + sum over the kernel of
// w[j][t] x[row shifted by t][ow]. x: the padded input at the row's first window.
template <int KD, int KH, int KW, int CB>
void direct_row(const float* x, const PaddedInput& p, const float* w, const float* bias, int64_t width, float* y,
                int64_t y_channel) {
  constexpr int K = KD * KH * KW;
#if defined(__AVX512F__)
  for (int64_t w0 = 0; w0 < width; w0 += 16) {
    const __mmask16 m = width - w0 >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (width - w0)) - 1);
    __m512 acc[CB];
    for (int j = 0; j < CB; ++j) acc[j] = _mm512_set1_ps(bias ? bias[j] : 0.0f);
    for (int kd = 0; kd < KD; ++kd)
      for (int kh = 0; kh < KH; ++kh)
        for (int kw = 0; kw < KW; ++kw) {
          const __m512 v = _mm512_maskz_loadu_ps(m, x + kd * p.plane + kh * p.row + w0 + kw);
          const int t = (kd * KH + kh) * KW + kw;
          for (int j = 0; j < CB; ++j) acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(w[j * K + t]), v, acc[j]);
        }
    for (int j = 0; j < CB; ++j) _mm512_mask_storeu_ps(y + j * y_channel + w0, m, acc[j]);
  }
#else
  for (int j = 0; j < CB; ++j)
    for (int64_t ow = 0; ow < width; ++ow) {
      float s = bias ? bias[j] : 0.0f;
      for (int kd = 0; kd < KD; ++kd)
        for (int kh = 0; kh < KH; ++kh)
          for (int kw = 0; kw < KW; ++kw)
            s += w[j * K + (kd * KH + kh) * KW + kw] * x[kd * p.plane + kh * p.row + ow + kw];
      y[j * y_channel + ow] = s;
    }
#endif
}

template <int KD, int KH, int KW>
void direct_forward(const Geometry& g, const float* px, const float* pw, const float* bias, float* py) {
  constexpr int K = KD * KH * KW;
  const PaddedInput p(g, px);
  const int64_t rows = g.n * g.rows();
  const bool parallel = g.n * g.cout * g.out_size * K >= kMinParallelWork;
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r / g.rows(), od = r % g.rows() / g.out[1], oh = r % g.out[1];
    const float* x = p.data.data() + n * p.sample + od * p.plane + oh * p.row;
    float* y = py + n * g.cout * g.out_size + (od * g.out[1] + oh) * g.out[2];
    for (int64_t c0 = 0; c0 < g.cout; c0 += 8) {
      const float* w = pw + c0 * K;
      const float* b = bias ? bias + c0 : nullptr;
      float* yc = y + c0 * g.out_size;
      switch (std::min<int64_t>(8, g.cout - c0)) {
        case 1: direct_row<KD, KH, KW, 1>(x, p, w, b, g.out[2], yc, g.out_size); break;
        case 2: direct_row<KD, KH, KW, 2>(x, p, w, b, g.out[2], yc, g.out_size); break;
        case 3: direct_row<KD, KH, KW, 3>(x, p, w, b, g.out[2], yc, g.out_size); break;
        case 4: direct_row<KD, KH, KW, 4>(x, p, w, b, g.out[2], yc, g.out_size); break;
        case 5: direct_row<KD, KH, KW, 5>(x, p, w, b, g.out[2], yc, g.out_size); break;
        case 6: direct_row<KD, KH, KW, 6>(x, p, w, b, g.out[2], yc, g.out_size); break;
        case 7: direct_row<KD, KH, KW, 7>(x, p, w, b, g.out[2], yc, g.out_size); break;
        default: direct_row<KD, KH, KW, 8>(x, p, w, b, g.out[2], yc, g.out_size); break;
      }
    }
  }
}

// dw[co][t] = sum over samples and output positions of dy[co] times x shifted by t,
// overwritten. Each thread takes whole output channels.
template <int KD, int KH, int KW>
void direct_weight_grad(const Geometry& g, const float* px, const float* pdy, float* pdw) {
  constexpr int K = KD * KH * KW, R = KD * KH;  // R: input rows a kernel window spans
  const PaddedInput p(g, px);
  const float* xbase = p.data.data();
  const int64_t prow = p.row, pplane = p.plane, psample = p.sample;
  const int64_t out0 = g.out[0], out1 = g.out[1], width = g.out[2], out_size = g.out_size, cout = g.cout;
  const int threads = static_cast<int>(std::min<int64_t>(compute_threads(), cout));
  const bool parallel = threads > 1 && g.n * cout * out_size * K >= kMinParallelWork;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t co = 0; co < cout; ++co) {
#if defined(__AVX512F__)
    __m512 acc[K];
    for (int t = 0; t < K; ++t) acc[t] = _mm512_setzero_ps();
    const int64_t full = width / 16 * 16;
    const __mmask16 tail = static_cast<__mmask16>((1u << (width - full)) - 1);
#else
    float acc[K] = {};
#endif
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t od = 0; od < out0; ++od)
        for (int64_t oh = 0; oh < out1; ++oh) {
          const float* dy = pdy + (n * cout + co) * out_size + (od * out1 + oh) * width;
          const float* x0 = xbase + n * psample + od * pplane + oh * prow;
          const float* rows[R];
          for (int kd = 0; kd < KD; ++kd)
            for (int kh = 0; kh < KH; ++kh) rows[kd * KH + kh] = x0 + kd * pplane + kh * prow;
#if defined(__AVX512F__)
          for (int64_t w0 = 0; w0 < full; w0 += 16) {
            const __m512 d = _mm512_loadu_ps(dy + w0);
#pragma GCC unroll 16
            for (int j = 0; j < R; ++j)
#pragma GCC unroll 8
              for (int kw = 0; kw < KW; ++kw)
                acc[j * KW + kw] = _mm512_fmadd_ps(d, _mm512_loadu_ps(rows[j] + w0 + kw), acc[j * KW + kw]);
          }
          if (tail) {
            const __m512 d = _mm512_maskz_loadu_ps(tail, dy + full);
#pragma GCC unroll 16
            for (int j = 0; j < R; ++j)
#pragma GCC unroll 8
              for (int kw = 0; kw < KW; ++kw)
                acc[j * KW + kw] =
                    _mm512_fmadd_ps(d, _mm512_maskz_loadu_ps(tail, rows[j] + full + kw), acc[j * KW + kw]);
          }
#else
          for (int j = 0; j < R; ++j)
            for (int kw = 0; kw < KW; ++kw) {
              float s = 0.0f;
              for (int64_t ow = 0; ow < width; ++ow) s += dy[ow] * rows[j][ow + kw];
              acc[j * KW + kw] += s;
            }
#endif
        }
    for (int t = 0; t < K; ++t) {
#if defined(__AVX512F__)
      pdw[co * K + t] = _mm512_reduce_add_ps(acc[t]);
#else
      pdw[co * K + t] = acc[t];
#endif
    }
  }
}

void forward_single_channel(const Geometry& g, const float* px, const float* pw, const float* bias, float* py) {
  if (g.k[0] == 3) return direct_forward<3, 3, 3>(g, px, pw, bias, py);
  if (g.k[1] == 5) return direct_forward<1, 5, 5>(g, px, pw, bias, py);
  direct_forward<1, 3, 3>(g, px, pw, bias, py);
}

void weight_grad_single_channel(const Geometry& g, const float* px, const float* pdy, float* pdw) {
  if (g.k[0] == 3) return direct_weight_grad<3, 3, 3>(g, px, pdy, pdw);
  if (g.k[1] == 5) return direct_weight_grad<1, 5, 5>(g, px, pdy, pdw);
  direct_weight_grad<1, 3, 3>(g, px, pdy, pdw);
}

// y (N, Cout, *out) = W col(x) + bias: the conv forward pass. bias may be null.
void forward_core(const Geometry& g, const float* px, const float* pw, const float* bias, float* py) {
  if (direct_single_channel(g)) return forward_single_channel(g, px, pw, bias, py);
  if (by_depth_slices(g)) return forward_by_slices(g, px, pw, bias, py);
  const int64_t K = g.kdim(), L = g.out_size, chunk = rows_per_chunk(g);
  const ChunkLoop loop(g, chunk, true);
  MemTagScope tag(MemTag::workspace);
  Tensor buffers = g.pointwise ? Tensor() : Tensor::empty({loop.slots(), K * chunk * g.out[2]});

  const ViewC w(pw, g.cout, K, Stride(K));
  loop.run([&](int64_t n, int64_t r0, int64_t r1, int slot) {
    const float* xn = px + n * g.cin * g.in_size;
    float* buf = g.pointwise ? nullptr : buffers.data() + slot * K * chunk * g.out[2];
    const int64_t c0 = r0 * g.out[2], nc = (r1 - r0) * g.out[2];
    View y(py + n * g.cout * L + c0, g.cout, nc, Stride(L));
    y.noalias() = w * patches(xn, g, r0, r1, buf);
    if (bias) y.colwise() += Eigen::Map<const Eigen::VectorXf>(bias, g.cout);
  });
}

// The conv backward pass without the bias: dx (like x) = col2im(W^T dy) and dw (like W)
// = sum over samples of dy col(x)^T, each overwritten; a null pointer skips that one
// (px may then be null too when dw is skipped).
// ensures: results do not depend on thread scheduling (fixed summation order).
void backward_core(const Geometry& g, const float* px, const float* pw, const float* pdy, float* pdx,
                   float* pdw) {
  const int64_t K = g.kdim(), L = g.out_size, chunk = rows_per_chunk(g);
  if (pdx == nullptr && pdw == nullptr) return;
  // col2im adds overlapping windows into dx, so one sample's chunks must not run at once:
  // when dw alone could spread chunks over the threads, dx takes a second pass.
  const bool scatter = pdx != nullptr && !g.pointwise;
  if (pdw != nullptr && direct_single_channel(g)) {
    weight_grad_single_channel(g, px, pdy, pdw);
    backward_core(g, px, pw, pdy, pdx, nullptr);
    return;
  }
  if (pdw != nullptr && by_depth_slices(g)) {
    weight_grad_by_slices(g, px, pdy, pdw);
    backward_core(g, px, pw, pdy, pdx, nullptr);
    return;
  }
  if (scatter && pdw != nullptr && ChunkLoop(g, chunk, true).by_chunks()) {
    backward_core(g, px, pw, pdy, nullptr, pdw);
    backward_core(g, px, pw, pdy, pdx, nullptr);
    return;
  }
  const ChunkLoop loop(g, chunk, !scatter || windows_disjoint(g));
  const bool gx = pdx != nullptr, gw = pdw != nullptr;
  MemTagScope tag(MemTag::workspace);
  Tensor buffers = g.pointwise ? Tensor() : Tensor::empty({loop.slots(), K * chunk * g.out[2]});
  // Each thread sums its chunks' weight gradients into its own slot (slot 0 is pdw); the
  // slots are then added in slot order, so the result is the same on every run.
  Tensor partials;
  if (gw) {
    std::fill_n(pdw, g.cout * K, 0.0f);
    if (loop.slots() > 1) partials = Tensor::zeros({loop.slots() - 1, g.cout * K});
  }
  if (gx && !g.pointwise) std::fill_n(pdx, g.n * g.cin * g.in_size, 0.0f);
  const ViewC w(pw, g.cout, K, Stride(K));
  loop.run([&](int64_t n, int64_t r0, int64_t r1, int slot) {
    const float* xn = gw ? px + n * g.cin * g.in_size : nullptr;
    float* dxn = gx ? pdx + n * g.cin * g.in_size : nullptr;
    float* buf = g.pointwise ? nullptr : buffers.data() + slot * K * chunk * g.out[2];
    float* dw = !gw ? nullptr : slot == 0 ? pdw : partials.data() + (slot - 1) * g.cout * K;
    const int64_t c0 = r0 * g.out[2], nc = (r1 - r0) * g.out[2];
    const ViewC dy(pdy + n * g.cout * L + c0, g.cout, nc, Stride(L));
    if (gw) {  // dW += dY col^T
      View(dw, g.cout, K, Stride(K)).noalias() += dy * patches(xn, g, r0, r1, buf).transpose();
    }
    if (gx) {  // dcol = W^T dY, scattered back onto the input (buf is free again)
      if (g.pointwise) {
        View(dxn + c0, g.cin, nc, Stride(L)).noalias() = w.transpose() * dy;
      } else {
        View(buf, K, nc, Stride(nc)).noalias() = w.transpose() * dy;
        col2im(buf, g, r0, r1, dxn);
      }
    }
  });
  if (gw) {
    Eigen::Map<Eigen::VectorXf> total(pdw, g.cout * K);
    for (int s = 1; s < loop.slots(); ++s)
      total += Eigen::Map<const Eigen::VectorXf>(partials.data() + (s - 1) * g.cout * K, g.cout * K);
  }
}

// out[c] = the sum of p (N, C, L) over samples and positions, one thread per channel.
void channel_sums(const float* p, int64_t n, int64_t c, int64_t l, float* out) {
  const bool parallel = n * c * l > (int64_t{1} << 16);
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (parallel)
  for (int64_t co = 0; co < c; ++co) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += Eigen::Map<const Eigen::VectorXf>(p + (i * c + co) * l, l).sum();
    out[co] = s;
  }
}

}  // namespace

namespace {

void forward_with(ConvKernel k, const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt,
                  Tensor& out) {
  if (k == ConvKernel::winograd) return winograd_conv_forward(x, weight, bias, opt, out);
  if (k == ConvKernel::onednn) return dnnl_conv_forward(x, weight, bias, opt, out);
  const Geometry g = make_geometry(x.shape(), out.shape(), weight, opt.stride, opt.padding, opt.dilation);
  forward_core(g, x.data(), weight.data(), bias.defined() ? bias.data() : nullptr, out.data());
}

void backward_with(ConvKernel k, const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                   const ConvOptions& opt, Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias);

}  // namespace

void conv_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt,
                  Tensor& out) {
  // A shape not yet chosen: each candidate's forward into `out` (recomputed below) and
  // backward into scratch, out standing in for the gradient.
  const auto time = [&](ConvKernel candidate) {
    Tensor dx = Tensor::empty(x.shape()), dw = Tensor::empty(weight.shape()), db;
    if (bias.defined()) db = Tensor::empty(bias.shape());
    const auto start = std::chrono::steady_clock::now();
    forward_with(candidate, x, weight, bias, opt, out);
    backward_with(candidate, x, weight, out, opt, dx, dw, db);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  forward_with(conv_kernel_for(x, weight, opt, time), x, weight, bias, opt, out);
}

void conv_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out, const ConvOptions& opt,
                   Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) {
  backward_with(conv_kernel_for(x, weight, opt), x, weight, grad_out, opt, grad_x, grad_weight, grad_bias);
}

namespace {

void backward_with(ConvKernel k, const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                   const ConvOptions& opt, Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) {
  if (k == ConvKernel::onednn) return dnnl_conv_backward(x, weight, grad_out, opt, grad_x, grad_weight, grad_bias);
  if (grad_x.defined() && k == ConvKernel::winograd) {
    winograd_conv_backward_data(weight, grad_out, opt, grad_x);
    Tensor no_grad_x;
    return backward_with(ConvKernel::im2col, x, weight, grad_out, opt, no_grad_x, grad_weight, grad_bias);
  }
  const Geometry g =
      make_geometry(x.shape(), grad_out.shape(), weight, opt.stride, opt.padding, opt.dilation);
  float* dx = grad_x.defined() ? grad_x.data() : nullptr;
  if (dx && dx_by_forward_conv(g)) {
    const Tensor flipped = flipped_weight(weight.data(), g);
    forward_core(dx_geometry(g), grad_out.data(), flipped.data(), nullptr, dx);
    dx = nullptr;
  }
  backward_core(g, x.data(), weight.data(), grad_out.data(), dx, grad_weight.defined() ? grad_weight.data() : nullptr);
  if (grad_bias.defined()) channel_sums(grad_out.data(), g.n, g.cout, g.out_size, grad_bias.data());
}

}  // namespace

// A transposed conv is the conv whose input is its output: weight (Cin, Cout, *k) is
// that conv's (Cout', Cin', *k), x plays the conv's output and out its input.
void conv_transpose_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const ConvTransposeOptions& opt, Tensor& out) {
  const Geometry g = make_geometry(out.shape(), x.shape(), weight, opt.stride, opt.padding, opt.dilation);
  backward_core(g, nullptr, weight.data(), x.data(), out.data(), nullptr);
  if (bias.defined()) {
    const Eigen::Map<const Eigen::VectorXf> b(bias.data(), g.cin);
    for (int64_t n = 0; n < g.n; ++n)
      View(out.data() + n * g.cin * g.in_size, g.cin, g.in_size, Stride(g.in_size)).colwise() += b;
  }
}

void conv_transpose_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out,
                             const ConvTransposeOptions& opt, Tensor& grad_x, Tensor& grad_weight,
                             Tensor& grad_bias) {
  const Geometry g =
      make_geometry(grad_out.shape(), x.shape(), weight, opt.stride, opt.padding, opt.dilation);
  if (grad_x.defined()) forward_core(g, grad_out.data(), weight.data(), nullptr, grad_x.data());
  if (grad_weight.defined())
    backward_core(g, grad_out.data(), weight.data(), x.data(), nullptr, grad_weight.data());
  if (grad_bias.defined()) channel_sums(grad_out.data(), g.n, g.cin, g.in_size, grad_bias.data());
}

}  // namespace quartet::engine::cpu

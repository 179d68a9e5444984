#pragma once

// The geometry a convolution hands to cuDNN, worked out from the engine's shapes: 1 to 3
// spatial dims lifted to cuDNN's 2 or 3 (a 1-D conv is a 2-D one over (1, W)), and a
// transposed conv as the conv it inverts, with x zero-extended where output_padding
// reaches past the stride. No CUDA types: the host tests check it without a GPU.

#include <cstdint>
#include <vector>

#include "engine/cuda/hd.h"

namespace quartet::engine::cuda {

// Output size of a conv along one dim: floor((in + 2p - d(k - 1) - 1) / s) + 1, as the
// conv op and cuDNN's cudnnGetConvolutionNdForwardOutputDim work it out.
// requires in + 2p - d(k - 1) - 1 >= 0
QUARTET_HD int64_t conv_output_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (k - 1) - 1) / stride + 1;
}

// A cross-correlation as cuDNN sees it: input (n, c_in, *in), filter (c_out, c_in, *k),
// output (n, c_out, *out) over the first `spatial` (2 or 3) entries of each array.
struct ConvGeometry {
  int spatial = 2;
  int64_t n = 0, c_in = 0, c_out = 0;
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, dilation[3] = {1, 1, 1};

  int64_t in_cells() const { return in[0] * in[1] * in[2]; }
  int64_t out_cells() const { return out[0] * out[1] * out[2]; }
};

// A packed box of cells (planes, d[0], d[1], d[2]); unused trailing dims are 1.
struct Box {
  int64_t d[3] = {1, 1, 1};
};

// The cell at `index` of a packed (planes, *from) array, as an index into a packed
// (planes, *to) array with the same origin; -1 where the cell lies outside `to`.
QUARTET_HD int64_t box_index(int64_t index, const Box& from, const Box& to) {
  const int64_t c2 = index % from.d[2];
  const int64_t c1 = index / from.d[2] % from.d[1];
  const int64_t c0 = index / (from.d[2] * from.d[1]) % from.d[0];
  const int64_t plane = index / (from.d[2] * from.d[1] * from.d[0]);
  if (c0 >= to.d[0] || c1 >= to.d[1] || c2 >= to.d[2]) return -1;
  return ((plane * to.d[0] + c0) * to.d[1] + c1) * to.d[2] + c2;
}

// Spatial sizes of `shape` (N, C, *spatial) lifted to `spatial` dims: missing leading
// dims are 1, so (N, C, W) becomes (N, C, 1, W) for cuDNN's 2-D conv.
inline Box lifted_box(const std::vector<int64_t>& shape, int spatial) {
  Box b;
  const int dims = static_cast<int>(shape.size()) - 2;
  for (int i = 0; i < dims; ++i) b.d[spatial - dims + i] = shape[2 + i];
  return b;
}

// Options of one value per spatial dim lifted likewise; leading dims get `fill`.
inline void lift_option(const std::vector<int64_t>& values, int spatial, int64_t fill, int64_t* dst) {
  const int dims = static_cast<int>(values.size());
  for (int i = 0; i < spatial; ++i) dst[i] = i < spatial - dims ? fill : values[i - (spatial - dims)];
}

// The conv of x (N, Cin, *in) with weight (Cout, Cin, *k) into out (N, Cout, *out):
// stride, padding and dilation hold one value per spatial dim of x.
inline ConvGeometry conv_geometry(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& w_shape,
                                  const std::vector<int64_t>& out_shape, const std::vector<int64_t>& stride,
                                  const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation) {
  ConvGeometry g;
  const int dims = static_cast<int>(x_shape.size()) - 2;
  g.spatial = dims < 2 ? 2 : dims;
  g.n = x_shape[0];
  g.c_in = x_shape[1];
  g.c_out = w_shape[0];
  const Box in = lifted_box(x_shape, g.spatial), k = lifted_box(w_shape, g.spatial),
            out = lifted_box(out_shape, g.spatial);
  for (int d = 0; d < 3; ++d) {
    g.in[d] = in.d[d];
    g.k[d] = k.d[d];
    g.out[d] = out.d[d];
  }
  lift_option(stride, g.spatial, 1, g.stride);
  lift_option(padding, g.spatial, 0, g.pad);
  lift_option(dilation, g.spatial, 1, g.dilation);
  return g;
}

// A transposed conv of x (N, Cin, *in) with weight (Cin, Cout, *k) into out (N, Cout,
// *out) is the input gradient of the conv whose input is out and whose filter is weight
// read as (Cin filters of Cout channels). That conv's output extent can exceed x's: when
// output_padding >= stride (allowed where it is < dilation) out has cells past the last
// window the CPU engine walks. cuDNN insists on the derived extent, so x is described
// zero-extended to it: the extra positions add nothing forward and get no gradient.
struct TransposedConv {
  ConvGeometry conv;  // in = out's spatial sizes, out = the extended extent of x
  Box x;              // x's own spatial sizes, lifted
  bool extended = false;  // conv.out is larger than x along some dim
};

inline TransposedConv transposed_conv_geometry(const std::vector<int64_t>& x_shape,
                                               const std::vector<int64_t>& w_shape,
                                               const std::vector<int64_t>& out_shape,
                                               const std::vector<int64_t>& stride,
                                               const std::vector<int64_t>& padding,
                                               const std::vector<int64_t>& dilation) {
  TransposedConv t;
  ConvGeometry& g = t.conv;
  const int dims = static_cast<int>(x_shape.size()) - 2;
  g.spatial = dims < 2 ? 2 : dims;
  g.n = x_shape[0];
  g.c_in = out_shape[1];
  g.c_out = x_shape[1];
  const Box in = lifted_box(out_shape, g.spatial), k = lifted_box(w_shape, g.spatial);
  t.x = lifted_box(x_shape, g.spatial);
  lift_option(stride, g.spatial, 1, g.stride);
  lift_option(padding, g.spatial, 0, g.pad);
  lift_option(dilation, g.spatial, 1, g.dilation);
  for (int d = 0; d < 3; ++d) {
    g.in[d] = in.d[d];
    g.k[d] = k.d[d];
    g.out[d] = d < g.spatial ? conv_output_size(g.in[d], g.k[d], g.stride[d], g.pad[d], g.dilation[d]) : 1;
    t.extended = t.extended || g.out[d] != t.x.d[d];
  }
  return t;
}

inline Box out_box(const ConvGeometry& g) { return Box{{g.out[0], g.out[1], g.out[2]}}; }

}  // namespace quartet::engine::cuda

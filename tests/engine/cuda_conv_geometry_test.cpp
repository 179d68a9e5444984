// The geometry the CUDA conv hands to cuDNN (engine/cuda/conv_geometry.h), checked on the
// host: output sizes against the conv ops, the lifting of 1-D convs to 2-D, and the
// transposed conv as the input gradient of a conv over a zero-extended x, computed
// naively from the geometry alone and compared with the CPU engine's conv_transpose.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/cuda/conv_geometry.h"
#include "engine/ops.h"
#include "engine/random.h"

namespace quartet::engine {
namespace {

using cuda::Box;
using cuda::ConvGeometry;

Tensor uniform(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape);
  uniform_(t, -1.0f, 1.0f, gen);
  return t;
}

struct ConvCase {
  Shape x, w;  // conv: w (Cout, Cin, *k); transposed: w (Cin, Cout, *k)
  std::vector<int64_t> stride, padding, dilation, output_padding;
};

std::string describe(const ConvCase& c) {
  return "x " + shape_str(c.x) + " w " + shape_str(c.w) + " stride " + shape_str(c.stride) + " padding " +
         shape_str(c.padding) + " dilation " + shape_str(c.dilation) + " output_padding " +
         shape_str(c.output_padding);
}

// y (n, c_out, *out) = the cross-correlation the geometry describes, from its fields only.
std::vector<float> naive_conv(const ConvGeometry& g, const float* x, const float* w) {
  std::vector<float> y(static_cast<size_t>(g.n * g.c_out * g.out_cells()), 0.0f);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t co = 0; co < g.c_out; ++co)
      for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
          for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
            double s = 0.0;
            for (int64_t ci = 0; ci < g.c_in; ++ci)
              for (int64_t k0 = 0; k0 < g.k[0]; ++k0)
                for (int64_t k1 = 0; k1 < g.k[1]; ++k1)
                  for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
                    const int64_t i0 = o0 * g.stride[0] - g.pad[0] + k0 * g.dilation[0];
                    const int64_t i1 = o1 * g.stride[1] - g.pad[1] + k1 * g.dilation[1];
                    const int64_t i2 = o2 * g.stride[2] - g.pad[2] + k2 * g.dilation[2];
                    if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2]) continue;
                    s += static_cast<double>(x[(((n * g.c_in + ci) * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2]) *
                         w[(((co * g.c_in + ci) * g.k[0] + k0) * g.k[1] + k1) * g.k[2] + k2];
                  }
            y[static_cast<size_t>((((n * g.c_out + co) * g.out[0] + o0) * g.out[1] + o1) * g.out[2] + o2)] =
                static_cast<float>(s);
          }
  return y;
}

// dx (n, c_in, *in) = the input gradient of that conv at dy, cuDNN's backward data.
std::vector<float> naive_backward_data(const ConvGeometry& g, const float* dy, const float* w) {
  std::vector<double> dx(static_cast<size_t>(g.n * g.c_in * g.in_cells()), 0.0);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t co = 0; co < g.c_out; ++co)
      for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
          for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
            const float d = dy[(((n * g.c_out + co) * g.out[0] + o0) * g.out[1] + o1) * g.out[2] + o2];
            for (int64_t ci = 0; ci < g.c_in; ++ci)
              for (int64_t k0 = 0; k0 < g.k[0]; ++k0)
                for (int64_t k1 = 0; k1 < g.k[1]; ++k1)
                  for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
                    const int64_t i0 = o0 * g.stride[0] - g.pad[0] + k0 * g.dilation[0];
                    const int64_t i1 = o1 * g.stride[1] - g.pad[1] + k1 * g.dilation[1];
                    const int64_t i2 = o2 * g.stride[2] - g.pad[2] + k2 * g.dilation[2];
                    if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2]) continue;
                    dx[static_cast<size_t>((((n * g.c_in + ci) * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2)] +=
                        static_cast<double>(d) * w[(((co * g.c_in + ci) * g.k[0] + k0) * g.k[1] + k1) * g.k[2] + k2];
                  }
          }
  return std::vector<float>(dx.begin(), dx.end());
}

void expect_close(const std::vector<float>& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want.data()[i], 1e-5f * (1.0f + std::abs(want.data()[i]))) << what << " element " << i;
}

TEST(CudaConvGeometry, DescribesTheCpuConv) {
  const std::vector<ConvCase> cases = {
      {{2, 3, 11}, {4, 3, 3}, {2}, {1}, {2}, {}},                          // 1-D, lifted to (1, W)
      {{1, 2, 7, 8}, {3, 2, 3, 2}, {1, 2}, {1, 0}, {1, 2}, {}},
      {{2, 1, 6, 5}, {2, 1, 1, 1}, {1}, {0}, {1}, {}},                     // pointwise
      {{1, 2, 5, 6, 4}, {2, 2, 3, 3, 3}, {2, 1, 1}, {1, 1, 1}, {1, 1, 2}, {}},
      {{1, 1, 3, 3}, {1, 1, 2, 2}, {1}, {3}, {1}, {}},                     // padding past the kernel
  };
  uint64_t seed = 1;
  for (const ConvCase& c : cases) {
    const Tensor x = uniform(c.x, seed++), w = uniform(c.w, seed++);
    const Tensor y = conv(x, w, Tensor(), {.stride = c.stride, .padding = c.padding, .dilation = c.dilation});
    const int dims = static_cast<int>(c.x.size()) - 2;
    const auto per_dim = [&](const std::vector<int64_t>& v) {
      return v.size() == 1 ? std::vector<int64_t>(static_cast<size_t>(dims), v[0]) : v;
    };
    const ConvGeometry g =
        cuda::conv_geometry(c.x, c.w, y.shape(), per_dim(c.stride), per_dim(c.padding), per_dim(c.dilation));
    EXPECT_EQ(g.spatial, dims < 2 ? 2 : dims) << describe(c);
    for (int d = 0; d < g.spatial; ++d)  // cuDNN derives the output extent; it must be the op's
      EXPECT_EQ(cuda::conv_output_size(g.in[d], g.k[d], g.stride[d], g.pad[d], g.dilation[d]), g.out[d])
          << describe(c) << " dim " << d;
    expect_close(naive_conv(g, x.data(), w.data()), y, describe(c));
  }
}

TEST(CudaConvGeometry, LiftsOneDimensionalConvsToTwo) {
  const ConvGeometry g = cuda::conv_geometry({2, 3, 11}, {4, 3, 3}, {2, 4, 5}, {2}, {1}, {3});
  EXPECT_EQ(g.spatial, 2);
  EXPECT_EQ(g.in[0], 1);
  EXPECT_EQ(g.in[1], 11);
  EXPECT_EQ(g.k[0], 1);
  EXPECT_EQ(g.k[1], 3);
  EXPECT_EQ(g.out[0], 1);
  EXPECT_EQ(g.out[1], 5);
  EXPECT_EQ(g.stride[0], 1);
  EXPECT_EQ(g.stride[1], 2);
  EXPECT_EQ(g.pad[0], 0);
  EXPECT_EQ(g.pad[1], 1);
  EXPECT_EQ(g.dilation[0], 1);
  EXPECT_EQ(g.dilation[1], 3);
}

// The transposed conv as backward data of the geometry's conv, x zero-extended to the
// conv's output extent, cropped back for its gradient: forward and the input gradient
// (the conv's forward pass, cropped) against the CPU engine.
TEST(CudaConvGeometry, TransposedConvIsBackwardDataOverTheExtendedInput) {
  const std::vector<ConvCase> cases = {
      {{2, 3, 5}, {3, 2, 3}, {2}, {1}, {1}, {1}},                        // 1-D, output_padding < stride
      {{1, 2, 4, 3}, {2, 3, 2, 2}, {2}, {0}, {1}, {0}},                  // unet's 2x2 up-conv
      {{1, 2, 4, 5}, {2, 2, 3, 3}, {3, 2}, {1, 1}, {1}, {2, 1}},
      {{1, 2, 5}, {2, 1, 3}, {1}, {1}, {3}, {2}},                        // output_padding >= stride, < dilation
      {{2, 1, 3, 4}, {1, 2, 2, 3}, {1, 2}, {0, 1}, {3, 2}, {2, 1}},      // extended along H only
      {{1, 2, 3, 2, 3}, {2, 2, 2, 2, 2}, {2}, {0}, {1}, {1}},            // 3-D
  };
  uint64_t seed = 30;
  for (const ConvCase& c : cases) {
    const Tensor x = uniform(c.x, seed++), w = uniform(c.w, seed++);
    const ConvTransposeOptions opt{
        .stride = c.stride, .padding = c.padding, .output_padding = c.output_padding, .dilation = c.dilation};
    const Tensor y = conv_transpose(x, w, Tensor(), opt);
    const int dims = static_cast<int>(c.x.size()) - 2;
    const auto per_dim = [&](const std::vector<int64_t>& v) {
      return v.size() == 1 ? std::vector<int64_t>(static_cast<size_t>(dims), v[0]) : v;
    };
    const cuda::TransposedConv t = cuda::transposed_conv_geometry(c.x, c.w, y.shape(), per_dim(c.stride),
                                                                  per_dim(c.padding), per_dim(c.dilation));
    bool needs_extension = false;
    for (int d = 0; d < t.conv.spatial; ++d) {
      // cuDNN derives the output extent of the conv from its input; x must be described so.
      EXPECT_EQ(t.conv.out[d], cuda::conv_output_size(t.conv.in[d], t.conv.k[d], t.conv.stride[d], t.conv.pad[d],
                                                      t.conv.dilation[d]))
          << describe(c);
      EXPECT_GE(t.conv.out[d], t.x.d[d]) << describe(c);
      needs_extension = needs_extension || t.conv.out[d] > t.x.d[d];
    }
    const std::vector<int64_t> op = per_dim(c.output_padding), stride = per_dim(c.stride);
    bool past_stride = false;
    for (size_t i = 0; i < op.size(); ++i) past_stride = past_stride || op[i] >= stride[i];
    EXPECT_EQ(t.extended, needs_extension) << describe(c);
    EXPECT_EQ(t.extended, past_stride) << describe(c);

    // x zero-extended with box_index, as the CUDA copy kernel does it.
    const int64_t planes = t.conv.n * t.conv.c_out;
    const Box ext = cuda::out_box(t.conv);
    std::vector<float> x_ext(static_cast<size_t>(planes * t.conv.out_cells()));
    for (int64_t i = 0; i < static_cast<int64_t>(x_ext.size()); ++i) {
      const int64_t k = cuda::box_index(i, ext, t.x);
      x_ext[static_cast<size_t>(i)] = k >= 0 ? x.data()[k] : 0.0f;
    }
    expect_close(naive_backward_data(t.conv, x_ext.data(), w.data()), y, describe(c) + " forward");

    // Input gradient: the conv's forward pass at the output gradient, cropped to x.
    const Tensor gy = uniform(y.shape(), seed++);
    Tensor xg = x.clone().set_requires_grad(true);
    conv_transpose(xg, w, Tensor(), opt).backward(gy);
    const std::vector<float> full = naive_conv(t.conv, gy.data(), w.data());
    std::vector<float> cropped(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t k = cuda::box_index(i, t.x, ext);
      ASSERT_GE(k, 0) << describe(c);
      cropped[static_cast<size_t>(i)] = full[static_cast<size_t>(k)];
    }
    expect_close(cropped, xg.grad(), describe(c) + " input gradient");
  }
}

TEST(CudaConvGeometry, BoxIndexExtendsAndCrops) {
  const Box small{{2, 3, 4}}, large{{3, 3, 6}};
  const int64_t planes = 2;
  int64_t inside = 0;
  for (int64_t i = 0; i < planes * 3 * 3 * 6; ++i) {
    const int64_t k = cuda::box_index(i, large, small);
    if (k < 0) continue;
    ++inside;
    EXPECT_EQ(cuda::box_index(k, small, large), i);
  }
  EXPECT_EQ(inside, planes * 2 * 3 * 4);
}

}  // namespace
}  // namespace quartet::engine

// The CUDA convolutions (cuDNN) against the CPU's im2col ones: 1-D, 2-D and 3-D convs
// with stride, padding and dilation, with and without bias; transposed convs with
// output_padding, including output_padding past the stride (x zero-extended for cuDNN);
// repeatability of the backward passes; and TF32 mode, within TF32's precision. cuDNN
// sums in another order than the CPU: 1e-4 relative.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/cuda/runtime.h"
#include "tests/engine/cuda/op_check.h"

namespace quartet::engine::cuda_test {
namespace {

using Inputs = std::vector<Tensor>;

constexpr double kConvTolerance = 1e-4;

struct ConvCase {
  Shape x, w;
  std::vector<int64_t> stride, padding, dilation, output_padding;
};

std::string describe(const char* op, const ConvCase& c) {
  return std::string(op) + " x " + shape_str(c.x) + " w " + shape_str(c.w) + " stride " + shape_str(c.stride) +
         " padding " + shape_str(c.padding) + " dilation " + shape_str(c.dilation) +
         (c.output_padding.empty() ? "" : " output_padding " + shape_str(c.output_padding));
}

ConvOptions conv_options(const ConvCase& c) {
  return {.stride = c.stride, .padding = c.padding, .dilation = c.dilation};
}

ConvTransposeOptions transpose_options(const ConvCase& c) {
  return {.stride = c.stride, .padding = c.padding, .output_padding = c.output_padding, .dilation = c.dilation};
}

// x (N, Cin, *in), w (Cout, Cin, *k).
std::vector<ConvCase> conv_cases() {
  return {
      {{2, 3, 17}, {4, 3, 3}, {1}, {1}, {1}, {}},                       // 1-D
      {{3, 2, 20}, {5, 2, 4}, {3}, {2}, {2}, {}},                       // 1-D, strided and dilated
      {{2, 3, 9, 11}, {4, 3, 3, 3}, {1}, {1}, {1}, {}},                 // 2-D "same"
      {{2, 4, 12, 10}, {6, 4, 3, 2}, {2, 1}, {1, 0}, {1, 2}, {}},       // 2-D, mixed per dim
      {{1, 8, 7, 7}, {16, 8, 1, 1}, {1}, {0}, {1}, {}},                 // pointwise
      {{2, 3, 8, 8}, {2, 3, 5, 5}, {2}, {2}, {1}, {}},
      {{1, 1, 6, 6}, {2, 1, 2, 2}, {1}, {3}, {1}, {}},                  // padding past the kernel
      {{2, 1, 10, 9, 8}, {4, 1, 3, 3, 3}, {1}, {1}, {1}, {}},           // unet3d's first conv
      {{1, 8, 6, 7, 5}, {8, 8, 3, 3, 3}, {1}, {1}, {1}, {}},
      {{1, 4, 9, 8, 10}, {3, 4, 3, 2, 3}, {2, 1, 2}, {1, 0, 2}, {1, 2, 1}, {}},  // 3-D, everything per dim
      {{2, 2, 8, 8, 8}, {4, 2, 2, 2, 2}, {2}, {0}, {1}, {}},            // 3-D down-sampling
  };
}

// x (N, Cin, *in), w (Cin, Cout, *k).
std::vector<ConvCase> transpose_cases() {
  return {
      {{2, 3, 7}, {3, 2, 3}, {2}, {1}, {1}, {1}},                        // 1-D
      {{2, 4, 5, 6}, {4, 3, 2, 2}, {2}, {0}, {1}, {0}},                  // unet's 2x2 up-conv
      {{1, 3, 5, 4}, {3, 2, 3, 3}, {2, 3}, {1, 1}, {1}, {1, 2}},         // output_padding < stride
      {{2, 2, 6, 5}, {2, 3, 3, 3}, {1}, {1}, {1}, {0}},                  // stride 1: a plain conv's input grad
      {{1, 2, 5}, {2, 3, 3}, {1}, {1}, {3}, {2}},                        // output_padding >= stride (< dilation)
      {{2, 2, 4, 5}, {2, 2, 2, 3}, {1, 2}, {0, 1}, {3, 2}, {2, 1}},      // extended along H only
      {{1, 4, 4, 4, 4}, {4, 2, 2, 2, 2}, {2}, {0}, {1}, {0}},            // unet3d's up-conv
      {{1, 2, 3, 4, 3}, {2, 3, 3, 2, 3}, {2, 1, 2}, {1, 0, 1}, {1, 2, 1}, {1, 1, 0}},  // 3-D, per dim
      {{1, 2, 3, 3, 3}, {2, 2, 2, 2, 2}, {1}, {0}, {2}, {1}},            // 3-D, extended everywhere
  };
}

TEST(CudaConv, ConvForwardAndBackwardMatchCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 1;
  for (const ConvCase& c : conv_cases()) {
    const Inputs in = {random_tensor(c.x, seed++), random_tensor(c.w, seed++), random_tensor({c.w[0]}, seed++)};
    const ConvOptions opt = conv_options(c);
    expect_same_on_gpu(describe("conv", c), in, [opt](const Inputs& v) { return conv(v[0], v[1], v[2], opt); },
                       kConvTolerance);
    expect_same_on_gpu(describe("conv without bias", c), {in[0], in[1]},
                       [opt](const Inputs& v) { return conv(v[0], v[1], Tensor(), opt); }, kConvTolerance);
  }
}

TEST(CudaConv, ConvTransposeForwardAndBackwardMatchCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 100;
  for (const ConvCase& c : transpose_cases()) {
    const Inputs in = {random_tensor(c.x, seed++), random_tensor(c.w, seed++), random_tensor({c.w[1]}, seed++)};
    const ConvTransposeOptions opt = transpose_options(c);
    expect_same_on_gpu(describe("conv_transpose", c), in,
                       [opt](const Inputs& v) { return conv_transpose(v[0], v[1], v[2], opt); }, kConvTolerance);
    expect_same_on_gpu(describe("conv_transpose without bias", c), {in[0], in[1]},
                       [opt](const Inputs& v) { return conv_transpose(v[0], v[1], Tensor(), opt); },
                       kConvTolerance);
  }
}

// Random valid geometries from a fixed seed: 1 to 3 spatial dims, kernel 1-3, stride
// 1-3, padding 0-2, dilation 1-2 per dim, and for the transposed conv any allowed
// output_padding.
ConvCase random_case(Generator& gen, bool transposed) {
  const int dims = 1 + static_cast<int>(gen.below(3));
  const int64_t n = 1 + static_cast<int64_t>(gen.below(2)), cin = 1 + static_cast<int64_t>(gen.below(5)),
                cout = 1 + static_cast<int64_t>(gen.below(5));
  ConvCase c;
  c.x = {n, cin};
  c.w = transposed ? Shape{cin, cout} : Shape{cout, cin};
  for (int d = 0; d < dims; ++d) {
    const int64_t k = 1 + static_cast<int64_t>(gen.below(3)), s = 1 + static_cast<int64_t>(gen.below(3)),
                  p = static_cast<int64_t>(gen.below(3)), dil = 1 + static_cast<int64_t>(gen.below(2));
    const int64_t extent = dil * (k - 1) + 1;
    // Conv: the padded input at least as large as the dilated kernel. Transposed:
    // (in - 1) s >= 2p, so the output has at least one cell.
    const int64_t in = transposed ? 1 + 2 * p + static_cast<int64_t>(gen.below(5))
                                  : std::max<int64_t>(1, extent - 2 * p) + static_cast<int64_t>(gen.below(8));
    c.x.push_back(in);
    c.w.push_back(k);
    c.stride.push_back(s);
    c.padding.push_back(p);
    c.dilation.push_back(dil);
    if (transposed)  // allowed below the stride or the dilation
      c.output_padding.push_back(static_cast<int64_t>(gen.below(static_cast<uint64_t>(std::max(s, dil)))));
  }
  return c;
}

TEST(CudaConv, RandomGeometriesMatchCpu) {
  QUARTET_NEED_GPU(1);
  Generator gen(2024);
  uint64_t seed = 500;
  for (int i = 0; i < 12; ++i) {
    const ConvCase c = random_case(gen, false);
    const Inputs in = {random_tensor(c.x, seed++), random_tensor(c.w, seed++), random_tensor({c.w[0]}, seed++)};
    const ConvOptions opt = conv_options(c);
    expect_same_on_gpu(describe("random conv", c), in, [opt](const Inputs& v) { return conv(v[0], v[1], v[2], opt); },
                       kConvTolerance);
  }
  for (int i = 0; i < 12; ++i) {
    const ConvCase c = random_case(gen, true);
    const Inputs in = {random_tensor(c.x, seed++), random_tensor(c.w, seed++), random_tensor({c.w[1]}, seed++)};
    const ConvTransposeOptions opt = transpose_options(c);
    expect_same_on_gpu(describe("random conv_transpose", c), in,
                       [opt](const Inputs& v) { return conv_transpose(v[0], v[1], v[2], opt); }, kConvTolerance);
  }
}

// Only some inputs requiring grad: the kernels skip the undefined gradients.
TEST(CudaConv, PartialGradientsMatchCpu) {
  QUARTET_NEED_GPU(1);
  const Tensor x = random_tensor({2, 3, 8, 7}, 201), w = random_tensor({4, 3, 3, 3}, 202);
  const Tensor g = random_tensor({2, 4, 8, 7}, 203);
  for (bool grad_x : {false, true}) {
    Tensor xh = x.clone().set_requires_grad(grad_x), wh = w.clone().set_requires_grad(!grad_x);
    Tensor xd = x.to(kGpu).set_requires_grad(grad_x), wd = w.to(kGpu).set_requires_grad(!grad_x);
    conv(xh, wh, Tensor(), {.padding = {1}}).backward(g);
    conv(xd, wd, Tensor(), {.padding = {1}}).backward(g.to(kGpu));
    const Tensor& host = grad_x ? xh.grad() : wh.grad();
    const Tensor& device = grad_x ? xd.grad() : wd.grad();
    ASSERT_TRUE(device.defined());
    EXPECT_LE(max_rel_diff(host, device), kConvTolerance) << (grad_x ? "grad x" : "grad w");
  }
}

// The same backward twice gives the same bits: the chosen cuDNN algorithms are
// deterministic (or the test names the pass that is not).
TEST(CudaConv, BackwardRepeatsBitForBit) {
  QUARTET_NEED_GPU(1);
  auto run = [](bool transposed) {
    const Tensor x = random_tensor(transposed ? Shape{2, 8, 6, 6, 6} : Shape{2, 8, 12, 12, 12}, 301).to(kGpu);
    const Tensor w = random_tensor(transposed ? Shape{8, 4, 2, 2, 2} : Shape{16, 8, 3, 3, 3}, 302).to(kGpu);
    const Tensor b = random_tensor({transposed ? 4 : 16}, 303).to(kGpu);
    Tensor xr = x.clone().set_requires_grad(true), wr = w.clone().set_requires_grad(true),
           br = b.clone().set_requires_grad(true);
    const Tensor y = transposed ? conv_transpose(xr, wr, br, {.stride = {2}}) : conv(xr, wr, br, {.padding = {1}});
    y.backward(random_tensor(y.shape(), 304).to(kGpu));
    return std::vector<std::vector<float>>{y.to_vector(), xr.grad().to_vector(), wr.grad().to_vector(),
                                           br.grad().to_vector()};
  };
  const char* names[] = {"forward", "grad x", "grad w", "grad bias"};
  for (bool transposed : {false, true}) {
    const auto first = run(transposed), second = run(transposed);
    for (size_t k = 0; k < first.size(); ++k) {
      bool same = first[k].size() == second[k].size();
      for (size_t i = 0; same && i < first[k].size(); ++i)
        same = std::bit_cast<uint32_t>(first[k][i]) == std::bit_cast<uint32_t>(second[k][i]);
      EXPECT_TRUE(same) << (transposed ? "conv_transpose " : "conv ") << names[k] << " differs between runs";
    }
  }
}

// TF32 tensor cores round inputs to 10 mantissa bits: the results stay within ~1e-2
// of fp32, and switching back gives fp32 again.
TEST(CudaConv, Tf32ModeStaysCloseAndSwitchesBack) {
  QUARTET_NEED_GPU(1);
  const ConvCase c{{2, 16, 12, 12, 12}, {16, 16, 3, 3, 3}, {1}, {1}, {1}, {}};
  const Inputs in = {random_tensor(c.x, 401), random_tensor(c.w, 402), random_tensor({16}, 403)};
  const ConvOptions opt = conv_options(c);
  const auto op = [opt](const Inputs& v) { return conv(v[0], v[1], v[2], opt); };
  struct Tf32 {  // back to fp32 however the test ends
    Tf32() { cuda::set_allow_tf32(true); }
    ~Tf32() { cuda::set_allow_tf32(false); }
  };
  {
    const Tf32 tf32;
    expect_same_on_gpu(describe("conv tf32", c), in, op, 2e-2);
    expect_same_on_gpu("matmul tf32", {random_tensor({64, 256}, 404), random_tensor({256, 32}, 405)},
                       [](const Inputs& v) { return matmul(v[0], v[1]); }, 2e-2);
  }
  expect_same_on_gpu(describe("conv fp32 again", c), in, op, kConvTolerance);
}

}  // namespace
}  // namespace quartet::engine::cuda_test

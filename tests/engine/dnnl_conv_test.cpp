// oneDNN's convolutions against ours (engine/cpu/conv.h), which conv_test.cpp checks
// against direct loops. Built with QUARTET_DNNL only.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/cpu/conv.h"
#include "engine/cpu/dnnl_conv.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using cpu::DnnlLayout;
using testing::random_tensor;
using testing::ThreadsScope;

struct Case {
  int spatial;
  int64_t n, cin, cout, side, k, stride, pad, dilation;
};

std::string describe(const Case& c) {
  return std::to_string(c.spatial) + "D n" + std::to_string(c.n) + " cin" + std::to_string(c.cin) + " cout" +
         std::to_string(c.cout) + " side" + std::to_string(c.side) + " k" + std::to_string(c.k) + " s" +
         std::to_string(c.stride) + " p" + std::to_string(c.pad) + " d" + std::to_string(c.dilation);
}

// Odd sides, so that stride 2 leaves input cells no window reaches.
std::vector<Case> cases() {
  std::vector<Case> out;
  for (int spatial : {2, 3})
    for (int64_t pad : {0, 1})
      for (int64_t stride : {1, 2}) {
        const int64_t side = spatial == 2 ? 9 : 7;
        out.push_back({spatial, 1, 1, 3, side, 3, stride, pad, 1});
        out.push_back({spatial, 3, 3, 16, side, 3, stride, pad, 1});
        out.push_back({spatial, 3, 16, 1, side, 3, stride, pad, 1});
      }
  out.push_back({2, 3, 16, 16, 11, 5, 1, 2, 1});  // lenet5-like 5x5
  out.push_back({2, 1, 3, 3, 11, 3, 1, 1, 2});    // dilated
  out.push_back({3, 1, 3, 3, 9, 3, 2, 1, 2});
  return out;
}

ConvOptions options(const Case& c) {
  ConvOptions opt;
  opt.stride.assign(c.spatial, c.stride);
  opt.padding.assign(c.spatial, c.pad);
  opt.dilation.assign(c.spatial, c.dilation);
  return opt;
}

Shape spatial_shape(Shape s, int spatial, int64_t v) {
  s.insert(s.end(), spatial, v);
  return s;
}

int64_t out_side(const Case& c) { return (c.side + 2 * c.pad - c.dilation * (c.k - 1) - 1) / c.stride + 1; }

// Relative tolerance: every element within 1e-4 of the largest magnitude of ours (or 1).
void expect_close(const Tensor& actual, const Tensor& expected, const std::string& what) {
  const std::vector<float> a = actual.to_vector(), e = expected.to_vector();
  ASSERT_EQ(a.size(), e.size()) << what;
  float scale = 1.0f;
  for (float v : e) scale = std::max(scale, std::abs(v));
  const float tol = 1e-4f * scale;
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], e[i], tol) << what << ", element " << i;
}

struct Tensors {
  Tensor x, w, b, g;
};

Tensors make_tensors(const Case& c) {
  return {random_tensor(spatial_shape({c.n, c.cin}, c.spatial, c.side), 1),
          random_tensor(spatial_shape({c.cout, c.cin}, c.spatial, c.k), 2), random_tensor({c.cout}, 3),
          random_tensor(spatial_shape({c.n, c.cout}, c.spatial, out_side(c)), 4)};
}

void check_case(const Case& c, DnnlLayout layout) {
  const std::string what = describe(c) + (layout == DnnlLayout::plain ? " plain" : " blocked");
  const ConvOptions opt = options(c);
  const Tensors t = make_tensors(c);
  Tensor y_ours = Tensor::empty(t.g.shape()), y_dnnl = Tensor::empty(t.g.shape());
  cpu::conv_forward(t.x, t.w, t.b, opt, y_ours);
  cpu::dnnl_conv_forward(t.x, t.w, t.b, opt, y_dnnl, layout);
  expect_close(y_dnnl, y_ours, what + " forward");

  Tensor dx_ours = Tensor::empty(t.x.shape()), dw_ours = Tensor::empty(t.w.shape()), db_ours = Tensor::empty({c.cout});
  Tensor dx = Tensor::full(t.x.shape(), 7.0f), dw = Tensor::full(t.w.shape(), 7.0f), db = Tensor::full({c.cout}, 7.0f);
  cpu::conv_backward(t.x, t.w, t.g, opt, dx_ours, dw_ours, db_ours);
  cpu::dnnl_conv_backward(t.x, t.w, t.g, opt, dx, dw, db, layout);
  expect_close(dx, dx_ours, what + " dx");
  expect_close(dw, dw_ours, what + " dw");
  expect_close(db, db_ours, what + " db");
}

TEST(DnnlConv, ReportsItsVersion) {
  EXPECT_TRUE(cpu::dnnl_available());
  EXPECT_EQ(cpu::dnnl_version().rfind("oneDNN ", 0), 0u) << cpu::dnnl_version();
}

TEST(DnnlConv, MatchesOursPlainLayout) {
  ThreadsScope threads(2);
  for (const Case& c : cases()) check_case(c, DnnlLayout::plain);
}

TEST(DnnlConv, MatchesOursBlockedLayout) {
  ThreadsScope threads(2);
  for (const Case& c : cases()) check_case(c, DnnlLayout::blocked);
}

TEST(DnnlConv, MatchesOursOnOneThread) {
  ThreadsScope threads(1);
  check_case({2, 3, 6, 16, 14, 5, 1, 0, 1}, DnnlLayout::plain);
  check_case({3, 1, 16, 16, 9, 3, 1, 1, 1}, DnnlLayout::blocked);
}

TEST(DnnlConv, WithoutBiasAndOnlySomeGradients) {
  const Case c{2, 3, 3, 16, 9, 3, 1, 1, 1};
  const ConvOptions opt = options(c);
  const Tensors t = make_tensors(c);
  Tensor y_ours = Tensor::empty(t.g.shape()), y = Tensor::empty(t.g.shape());
  cpu::conv_forward(t.x, t.w, Tensor(), opt, y_ours);
  cpu::dnnl_conv_forward(t.x, t.w, Tensor(), opt, y);
  expect_close(y, y_ours, "forward without bias");

  // The bias gradient alone: oneDNN needs a weight gradient beside it, which must not leak.
  Tensor dx_ours = Tensor::empty(t.x.shape()), dw_ours = Tensor::empty(t.w.shape()), db_ours = Tensor::empty({c.cout});
  cpu::conv_backward(t.x, t.w, t.g, opt, dx_ours, dw_ours, db_ours);
  Tensor none, db = Tensor::empty({c.cout});
  cpu::dnnl_conv_backward(t.x, t.w, t.g, opt, none, none, db);
  EXPECT_FALSE(none.defined());
  expect_close(db, db_ours, "db alone");
  Tensor dw = Tensor::empty(t.w.shape());
  cpu::dnnl_conv_backward(t.x, t.w, t.g, opt, none, dw, none);
  expect_close(dw, dw_ours, "dw alone");
  Tensor dx = Tensor::empty(t.x.shape());
  cpu::dnnl_conv_backward(t.x, t.w, t.g, opt, dx, none, none);
  expect_close(dx, dx_ours, "dx alone");
}

// Same shape, same threads: bitwise the same results, in both layouts.
TEST(DnnlConv, RepeatedCallsAreBitwiseEqual) {
  ThreadsScope threads(2);
  const Case c{3, 2, 16, 32, 12, 3, 1, 1, 1};
  const ConvOptions opt = options(c);
  const Tensors t = make_tensors(c);
  for (DnnlLayout layout : {DnnlLayout::plain, DnnlLayout::blocked}) {
    std::vector<std::vector<float>> runs[2];
    for (auto& run : runs) {
      Tensor y = Tensor::empty(t.g.shape()), dx = Tensor::empty(t.x.shape());
      Tensor dw = Tensor::empty(t.w.shape()), db = Tensor::empty({c.cout});
      cpu::dnnl_conv_forward(t.x, t.w, t.b, opt, y, layout);
      cpu::dnnl_conv_backward(t.x, t.w, t.g, opt, dx, dw, db, layout);
      run = {y.to_vector(), dx.to_vector(), dw.to_vector(), db.to_vector()};
    }
    for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_EQ(runs[0][i], runs[1][i]) << "result " << i;
  }
}

TEST(DnnlConv, RepeatedShapesReuseTheirPrimitives) {
  ThreadsScope threads(1);
  const Case c{2, 1, 3, 5, 13, 3, 1, 1, 1};
  const ConvOptions opt = options(c);
  const Tensors t = make_tensors(c);
  Tensor y = Tensor::empty(t.g.shape()), dx = Tensor::empty(t.x.shape());
  Tensor dw = Tensor::empty(t.w.shape()), db = Tensor::empty({c.cout});
  cpu::dnnl_conv_forward(t.x, t.w, t.b, opt, y);
  cpu::dnnl_conv_backward(t.x, t.w, t.g, opt, dx, dw, db);
  const size_t after_first = cpu::dnnl_cached_primitives();
  for (int i = 0; i < 3; ++i) {
    cpu::dnnl_conv_forward(t.x, t.w, t.b, opt, y);
    cpu::dnnl_conv_backward(t.x, t.w, t.g, opt, dx, dw, db);
  }
  EXPECT_EQ(cpu::dnnl_cached_primitives(), after_first);
  // Another thread count is another primitive: oneDNN fixes its split when it creates one.
  ThreadsScope two(2);
  cpu::dnnl_conv_forward(t.x, t.w, t.b, opt, y);
  EXPECT_EQ(cpu::dnnl_cached_primitives(), after_first + 1);
}

}  // namespace
}  // namespace quartet::engine

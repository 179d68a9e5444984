#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "engine/ops.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::gradcheck;
using testing::param;
using testing::random_tensor;
using testing::throws_invalid_argument;

TEST(Broadcast, ShapesAlignAtTheLastDim) {
  EXPECT_EQ(broadcast_shape({2, 3, 4}, {4}), (Shape{2, 3, 4}));
  EXPECT_EQ(broadcast_shape({2, 1, 4}, {3, 1}), (Shape{2, 3, 4}));
  EXPECT_EQ(broadcast_shape({}, {5}), (Shape{5}));
  EXPECT_TRUE(throws_invalid_argument([] { broadcast_shape({2, 3}, {4}); }, {"[2, 3]", "[4]", "broadcast"}));
}

TEST(Broadcast, BinaryOpsRepeatTheSmallerInput) {
  Tensor a = Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor row = Tensor::from_vector({3}, {10, 20, 30});
  Tensor col = Tensor::from_vector({2, 1}, {2, 4});
  EXPECT_EQ(add(a, row).to_vector(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(sub(a, col).to_vector(), (std::vector<float>{-1, 0, 1, 0, 1, 2}));
  EXPECT_EQ(mul(col, a).to_vector(), (std::vector<float>{2, 4, 6, 16, 20, 24}));
  EXPECT_EQ(div(a, col).to_vector(), (std::vector<float>{0.5f, 1, 1.5f, 1, 1.25f, 1.5f}));
  EXPECT_EQ(add(row, col).shape(), (Shape{2, 3}));
  EXPECT_TRUE(
      throws_invalid_argument([] { sub(Tensor::zeros({2, 3}), Tensor::zeros({2})); }, {"sub", "[2, 3]", "[2]"}));
}

TEST(Broadcast, BinaryGradientsSumOverRepeatedDims) {
  for (auto op : {+[](const Tensor& a, const Tensor& b) { return add(a, b); },
                  +[](const Tensor& a, const Tensor& b) { return sub(a, b); },
                  +[](const Tensor& a, const Tensor& b) { return mul(a, b); },
                  +[](const Tensor& a, const Tensor& b) { return div(a, b); }}) {
    EXPECT_TRUE(gradcheck([op](const TensorList& in) { return op(in[0], in[1]); },
                          {param({2, 3, 4}, 1), param({3, 1}, 2, 0.5f, 1.5f)}));
    EXPECT_TRUE(gradcheck([op](const TensorList& in) { return op(in[0], in[1]); },
                          {param({1, 4}, 3), param({3, 1, 1}, 4, 0.5f, 1.5f)}));
    EXPECT_TRUE(gradcheck([op](const TensorList& in) { return op(in[0], in[1]); },
                          {param({2, 3}, 5), param({2, 3}, 6, 0.5f, 1.5f)}));
  }
}

TEST(Broadcast, ExpandAndSumToAreAdjoint) {
  Tensor x = Tensor::from_vector({2, 1}, {1, 2});
  EXPECT_EQ(expand(x, {2, 2, 3}).to_vector(), (std::vector<float>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(sum_to(Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6}), {3}).to_vector(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(sum_to(Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6}), {2, 1}).to_vector(), (std::vector<float>{6, 15}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return expand(in[0], {3, 2, 4}); }, {param({2, 1}, 7)}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return sum_to(in[0], {1, 4}); }, {param({3, 2, 4}, 8)}));
  EXPECT_TRUE(throws_invalid_argument([] { expand(Tensor::zeros({3}), {2, 4}); }, {"expand", "[3]", "[2, 4]"}));
}

TEST(Layout, TransposeMovesDims) {
  Tensor x = Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(transpose(x, {1, 0}).to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  Tensor y = random_tensor({2, 3, 4, 5}, 9);
  Tensor t = transpose(y, {2, 0, 3, 1});
  ASSERT_EQ(t.shape(), (Shape{4, 2, 5, 3}));
  const std::vector<float> vy = y.to_vector(), vt = t.to_vector();
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c)
        for (int d = 0; d < 5; ++d) ASSERT_EQ(vt[((c * 2 + a) * 5 + d) * 3 + b], vy[((a * 3 + b) * 4 + c) * 5 + d]);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return transpose(in[0], {2, 0, 1}); }, {param({2, 3, 4}, 10)}));
  EXPECT_TRUE(throws_invalid_argument([] { transpose(Tensor::zeros({2, 3}), {0, 0}); }, {"transpose", "perm"}));
}

TEST(Layout, PadSurroundsWithAConstant) {
  Tensor x = Tensor::from_vector({1, 2}, {1, 2});
  EXPECT_EQ(pad(x, {0, 1}, {1, 0}, 9).to_vector(), (std::vector<float>{9, 1, 2, 9, 9, 9}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return pad(in[0], {0, 1, 2}, {1, 0, 1}, 0.5f); },
                        {param({2, 3, 2}, 11)}));
  EXPECT_TRUE(throws_invalid_argument([] { pad(Tensor::zeros({2}), {-1}, {0}, 0); }, {"pad", ">= 0"}));
}

TEST(Layout, NarrowKeepsARangeOfOneDim) {
  Tensor x = Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(narrow(x, 1, 1, 2).to_vector(), (std::vector<float>{2, 3, 5, 6}));
  EXPECT_EQ(narrow(x, 0, 1, 1).to_vector(), (std::vector<float>{4, 5, 6}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return narrow(in[0], 1, 1, 2); }, {param({2, 4, 3}, 18)}));
  EXPECT_TRUE(throws_invalid_argument([] { narrow(Tensor::zeros({2, 3}), 1, 2, 2); }, {"narrow", "[2, 4]", "[2, 3]"}));
}

TEST(Layout, ClipClampsAndPassesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> y = clip(Tensor::from_vector({4}, {-1, 3, 7, nan}), 0, 6).to_vector();
  EXPECT_EQ(y[0], 0);
  EXPECT_EQ(y[1], 3);
  EXPECT_EQ(y[2], 6);
  EXPECT_TRUE(std::isnan(y[3]));
  // Away from the corners, where finite differences straddle the kink.
  Tensor x = Tensor::from_vector({4}, {-2, 0.5f, 3, 8});
  x.set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return clip(in[0], 0, 6); }, {x}));
  EXPECT_TRUE(throws_invalid_argument([] { clip(Tensor::zeros({1}), 2, 1); }, {"clip", "min 2", "max 1"}));
}

TEST(Layout, WhereChoosesPerElementAndBroadcastsAllThree) {
  const float inf = std::numeric_limits<float>::infinity();
  // A causal mask (T, T) over scores (B, T, T); -inf in the branch not taken stays out.
  Tensor mask = Tensor::from_vector({2, 2}, {1, 0, 1, 1});
  Tensor scores = Tensor::from_vector({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(where(mask, scores, Tensor::full({1}, -inf)).to_vector(),
            (std::vector<float>{1, -inf, 3, 4, 5, -inf, 7, 8}));
  Tensor row = Tensor::from_vector({3}, {1, 0, 2});
  Tensor col = Tensor::from_vector({2, 1}, {10, 20});
  EXPECT_EQ(where(row, col, Tensor::from_vector({1}, {inf})).to_vector(),
            (std::vector<float>{10, inf, 10, 20, inf, 20}));
  Tensor cond = Tensor::from_vector({3, 1, 1}, {1, 0, 1});
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return where(cond, in[0], in[1]); },
                        {param({2, 4}, 20), param({3, 1, 4}, 21)}));
  EXPECT_TRUE(throws_invalid_argument([] { where(Tensor::zeros({3}), Tensor::zeros({2, 3}), Tensor::zeros({2})); },
                                      {"where", "cond [3]", "a [2, 3]", "b [2]"}));
}

TEST(Layout, GatherPicksAlongAnAxisAndSumsRepeatedPicks) {
  Tensor x = Tensor::from_vector({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  // x[:, 0]: a scalar index drops the axis (a ViT's class token).
  Tensor cls = gather(x, 1, {0}, {});
  EXPECT_EQ(cls.shape(), (Shape{2, 2}));
  EXPECT_EQ(cls.to_vector(), (std::vector<float>{1, 2, 7, 8}));
  // Indices of any shape, negative ones from the end, repeats allowed.
  Tensor y = gather(x, 1, {2, -1, 0, 1}, {2, 2});
  EXPECT_EQ(y.shape(), (Shape{2, 2, 2, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{5, 6, 5, 6, 1, 2, 3, 4, 11, 12, 11, 12, 7, 8, 9, 10}));
  EXPECT_EQ(gather(x, 2, {1}, {1}).to_vector(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(gather(x, 0, {1}, {}).shape(), (Shape{3, 2}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return gather(in[0], 1, {2, -1, 0, 2}, {2, 2}); },
                        {param({2, 3, 2}, 22)}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return gather(in[0], 0, {1, 1}, {2}); }, {param({3, 4}, 23)}));
  EXPECT_TRUE(throws_invalid_argument([&] { gather(x, 1, {3}, {1}); }, {"gather", "index 3", "[-3, 3)"}));
  EXPECT_TRUE(throws_invalid_argument([&] { gather(x, 3, {0}, {1}); }, {"gather", "axis 3"}));
}

TEST(Dense, BatchedMatmulBroadcastsTheBatch) {
  Tensor a = random_tensor({2, 3, 4, 5}, 12), b = random_tensor({3, 5, 2}, 13);
  Tensor c = batched_matmul(a, b);
  ASSERT_EQ(c.shape(), (Shape{2, 3, 4, 2}));
  const std::vector<float> va = a.to_vector(), vb = b.to_vector(), vc = c.to_vector();
  for (int n = 0; n < 2; ++n)
    for (int h = 0; h < 3; ++h)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 2; ++j) {
          double s = 0;
          for (int k = 0; k < 5; ++k) s += va[((n * 3 + h) * 4 + i) * 5 + k] * vb[(h * 5 + k) * 2 + j];
          ASSERT_NEAR(vc[((n * 3 + h) * 4 + i) * 2 + j], s, 1e-5) << n << h << i << j;
        }
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return batched_matmul(in[0], in[1]); },
                        {param({2, 3, 4}, 14), param({4, 2}, 15)}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return batched_matmul(in[0], in[1]); },
                        {param({2, 1, 3, 4}, 16), param({3, 4, 2}, 17)}));
  EXPECT_TRUE(throws_invalid_argument([] { batched_matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 2})); },
                                      {"batched_matmul", "[2, 3, 4]", "[3, 2]"}));
}

}  // namespace
}  // namespace quartet::engine

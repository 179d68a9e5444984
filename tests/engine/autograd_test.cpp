#include <gtest/gtest.h>

#include "engine/autograd.h"
#include "engine/ops.h"

namespace quartet::engine {
namespace {

Tensor leaf(const Shape& s, std::vector<float> v) {
  Tensor t = Tensor::from_vector(s, v);
  t.set_requires_grad(true);
  return t;
}

TEST(Autograd, GradientsOfSharedInputAreSummed) {
  Tensor a = leaf({2}, {1, 2});
  Tensor y = sum(mul(a, a));  // d/da = 2a
  y.backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{2, 4}));
}

TEST(Autograd, GradientsAccumulateAcrossBackwardPassesUntilZeroed) {
  Tensor a = leaf({2}, {1, 2});
  sum(scale(a, 3)).backward();
  sum(scale(a, 3)).backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{6, 6}));
  a.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(Autograd, NoGradScopeRecordsNothing) {
  Tensor a = leaf({2}, {1, 2});
  NoGradScope no_grad;
  Tensor y = scale(a, 2);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

TEST(Autograd, GradReadyHookFiresOnceWithTheFinalSum) {
  Tensor a = leaf({1}, {3});
  int calls = 0;
  float seen = 0;
  a.add_grad_ready_hook([&](const Tensor& p) {
    ++calls;
    seen = p.grad().item();
  });
  // a is used three times: the hook must see 1 + 2 + 4 = 7, not a partial sum.
  Tensor y = add(add(a, scale(a, 2)), scale(a, 4));
  sum(y).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_FLOAT_EQ(seen, 7.0f);
}

TEST(Autograd, HooksFireBeforeBackwardReturnsForEveryLeaf) {
  Tensor w1 = leaf({1}, {2}), w2 = leaf({1}, {5});
  std::vector<int> order;
  w1.add_grad_ready_hook([&](const Tensor&) { order.push_back(1); });
  w2.add_grad_ready_hook([&](const Tensor&) { order.push_back(2); });
  // w2 is used last in forward, so its gradient is ready first (as in DDP's reducer).
  Tensor h = mul(Tensor::from_vector({1}, {1}), w1);
  Tensor y = mul(h, w2);
  sum(y).backward();
  EXPECT_EQ(order, (std::vector<int>{2, 1}));
}

TEST(Autograd, BackwardOnNonScalarNeedsAGradient) {
  Tensor a = leaf({2}, {1, 2});
  Tensor y = scale(a, 2);
  EXPECT_THROW(y.backward(), std::invalid_argument);
  y.backward(Tensor::from_vector({2}, {1, 10}));
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{2, 20}));
}

TEST(Autograd, BackwardWithoutParametersIsAnError) {
  Tensor a = Tensor::from_vector({1}, {1});
  EXPECT_THROW(sum(a).backward(), std::logic_error);
}

TEST(Autograd, GradientOfLeafIsTaggedAsGradients) {
  Tensor a = leaf({4}, {1, 2, 3, 4});
  sum(a).backward();
  EXPECT_EQ(a.grad().mem_tag(), MemTag::gradients);
}

}  // namespace
}  // namespace quartet::engine

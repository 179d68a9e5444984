#include <gtest/gtest.h>

#include "engine/autograd.h"
#include "engine/memory.h"
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

int64_t activations_now() { return memory_stats().current[static_cast<int>(MemTag::activations)]; }

TEST(Autograd, AnIntermediateNoBackwardSavedIsFreedWhenForwardDropsIt) {
  Tensor a = leaf({1000}, std::vector<float>(1000, 1.0f));
  const int64_t before = activations_now();
  Tensor loss;
  {
    Tensor y = scale(a, 2);  // scale saves nothing for its backward
    loss = sum(y);
  }
  EXPECT_EQ(activations_now() - before, 4);  // only the scalar loss is left
  loss.backward();
  EXPECT_EQ(a.grad().to_vector(), std::vector<float>(1000, 2.0f));
}

TEST(Autograd, BackwardFreesWhatOpsSavedAndASecondBackwardThrows) {
  Tensor a = leaf({1000}, std::vector<float>(1000, 1.0f));
  const int64_t before = activations_now();
  Tensor loss = sum(sigmoid(scale(a, 2)));  // sigmoid saves its output
  EXPECT_GE(activations_now() - before, 4000);
  loss.backward();
  EXPECT_EQ(activations_now() - before, 4);
  EXPECT_THROW(loss.backward(), std::logic_error);
}

TEST(Autograd, ReluKeepsOneBitAnElementForBackward) {
  std::vector<float> v(1000);
  for (int i = 0; i < 1000; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 3) - 1.0f;  // -1, 0, 1
  Tensor a = leaf({1000}, v);
  const int64_t before = activations_now();
  Tensor loss = sum(relu(scale(a, 2)));
  // The loss and ceil(1000 / 32) = 32 words of mask: scale's and relu's outputs are gone.
  EXPECT_EQ(activations_now() - before, 4 + 32 * 4);
  loss.backward();
  EXPECT_EQ(activations_now() - before, 4);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(a.grad().to_vector()[static_cast<size_t>(i)], i % 3 == 2 ? 2.0f : 0.0f);
}

TEST(Autograd, ReluReusingWritesIntoAnInputNothingElseHolds) {
  Tensor a = leaf({1000}, std::vector<float>(1000, -1.0f));
  Tensor b = leaf({1000}, std::vector<float>(1000, 1.0f));
  Tensor kept = scale(a, 2);  // the caller keeps this one: relu_reusing must not overwrite it
  Tensor out = relu_reusing(kept);
  EXPECT_EQ(kept.to_vector(), std::vector<float>(1000, -2.0f));
  EXPECT_EQ(out.to_vector(), std::vector<float>(1000, 0.0f));

  Tensor handed = scale(b, 3);
  const float* storage = handed.data();
  Tensor reused = relu_reusing(std::move(handed));
  EXPECT_EQ(reused.data(), storage);  // the input's buffer became the output
  EXPECT_EQ(reused.to_vector(), std::vector<float>(1000, 3.0f));
  sum(reused).backward();
  EXPECT_EQ(b.grad().to_vector(), std::vector<float>(1000, 3.0f));  // the graph still reaches b
}

TEST(Autograd, FirstGradientOfALeafIsAdoptedNotCopied) {
  Tensor a = leaf({100000}, std::vector<float>(100000, 1.0f));
  Tensor loss = sum(scale(a, 3));
  reset_memory_peaks();
  const int64_t base = memory_stats().total_current;
  loss.backward();
  // sum's backward fills one a-sized buffer and scale's writes a second, which becomes
  // a.grad() as it is: a copy would make a third.
  EXPECT_LE(memory_stats().total_peak - base, 2 * 400000 + 64);
  EXPECT_EQ(a.grad().mem_tag(), MemTag::gradients);
  EXPECT_EQ(a.grad().to_vector(), std::vector<float>(100000, 3.0f));
}

TEST(Autograd, BackwardFromSeveralRootsAddsTheirContributions) {
  // skip = 2a feeds the root main = skip * a, and is itself a root: d/da of
  // <main, g_main> + <skip, g_skip> = g_main * (2a + 2a) + 2 g_skip.
  Tensor a = leaf({2}, {1, 2});
  Tensor skip = scale(a, 2);
  Tensor main = mul(skip, a);
  run_backward(TensorList{main, skip}, TensorList{Tensor::from_vector({2}, {1, 10}), Tensor::from_vector({2}, {3, 5})});
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{1 * 4 + 2 * 3, 10 * 8 + 2 * 5}));
}

TEST(Autograd, BackwardFromSeveralRootsChecksItsArguments) {
  Tensor a = leaf({2}, {1, 2});
  Tensor y = scale(a, 2);
  EXPECT_THROW(run_backward(TensorList{y}, TensorList{}), std::invalid_argument);
  EXPECT_THROW(run_backward(TensorList{}, TensorList{}), std::invalid_argument);
  EXPECT_THROW(run_backward(TensorList{y}, TensorList{Tensor::zeros({3})}), std::invalid_argument);
  // The same root twice: its seeds add up, and the caller's gradient is not modified.
  Tensor g = Tensor::from_vector({2}, {1, 1});
  run_backward(TensorList{y, y}, TensorList{g, g});
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{4, 4}));
  EXPECT_EQ(g.to_vector(), (std::vector<float>{1, 1}));
}

}  // namespace
}  // namespace quartet::engine

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/ops.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

// A group of `copies` processes that all hold the same tensor: the sum is that many times
// it. Counts its calls, so a test sees where the communication happens.
class CopiesGroup final : public StatsReducer {
 public:
  explicit CopiesGroup(float copies) : copies_(copies) {}
  void all_reduce_sum(Tensor& t) override {
    ++calls;
    scale_(t, copies_);
  }
  int calls = 0;

 private:
  float copies_;
};

TEST(TensorParallelOps, AllReduceBackwardIsTheIdentityForwardAndSumsTheGradient) {
  CopiesGroup group(3.0f);
  Tensor x = Tensor::from_vector({2}, {1.0f, -2.0f});
  x.set_requires_grad(true);
  Tensor y = all_reduce_backward(x, group);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(group.calls, 0);
  mul(y, Tensor::from_vector({2}, {5.0f, 7.0f})).backward(Tensor::full({2}, 1.0f));
  EXPECT_EQ(group.calls, 1);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{15.0f, 21.0f}));
}

TEST(TensorParallelOps, AllReduceForwardSumsAndPassesTheGradientOn) {
  CopiesGroup group(2.0f);
  Tensor x = Tensor::from_vector({2}, {1.5f, 4.0f});
  x.set_requires_grad(true);
  Tensor y = all_reduce_forward(x, group);
  EXPECT_EQ(group.calls, 1);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{3.0f, 8.0f}));
  EXPECT_EQ(x.to_vector(), (std::vector<float>{1.5f, 4.0f})) << "the input is left as it was";
  mul(y, Tensor::from_vector({2}, {5.0f, 7.0f})).backward(Tensor::full({2}, 1.0f));
  EXPECT_EQ(group.calls, 1);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{5.0f, 7.0f}));
}

TEST(TensorParallelOps, TheGradientAnotherConsumerSeesIsNotSummedInPlace) {
  CopiesGroup group(2.0f);
  Tensor x = Tensor::from_vector({1}, {1.0f});
  x.set_requires_grad(true);
  // x feeds f and, directly, the sum: x's gradient is f's summed part plus the direct 1.
  Tensor y = add(all_reduce_backward(x, group), x);
  y.backward(Tensor::full({1}, 1.0f));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{3.0f}));
}


// `ranks` processes that hold the same slice of every sequence, seen from process 0: the
// all-gather repeats the slice, the reduce-scatter keeps `ranks` times process 0's part.
class SameSliceGroup final : public StatsReducer {
 public:
  explicit SameSliceGroup(int ranks) : ranks_(ranks) {}
  void all_reduce_sum(Tensor&) override { ADD_FAILURE() << "no all-reduce expected"; }
  void all_gather(const Tensor& part, Tensor& whole) override {
    ++gathers;
    for (int r = 0; r < ranks_; ++r) copy_range(whole, r * part.numel(), part, 0, part.numel());
  }
  void reduce_scatter_sum(const Tensor& whole, Tensor& part) override {
    ++scatters;
    copy_range(part, 0, whole, 0, part.numel());
    scale_(part, static_cast<float>(ranks_));
  }
  int gathers = 0, scatters = 0;

 private:
  int ranks_;
};

// The outputs and gradients of linears on the gathered sequence, computed as plain ops on
// the sequence built by concat; the whole sequence gathered once more in backward, and
// the input's gradient, summed over the three outputs, reduce-scattered once.
TEST(TensorParallelOps, GatheredLinearsEqualLinearsOnTheWholeSequence) {
  const int ranks = 2;
  const int64_t b = 2, s = 3, w = 4;
  SameSliceGroup group(ranks);
  Tensor x = testing::random_tensor({b, s, w}, 1);
  x.set_requires_grad(true);
  std::vector<std::pair<Tensor, Tensor>> layers;
  for (int64_t out : {5, 2, 3}) {
    Tensor weight = testing::random_tensor({out, w}, 10 + static_cast<uint64_t>(out));
    Tensor bias = testing::random_tensor({out}, 20 + static_cast<uint64_t>(out));
    weight.set_requires_grad(true), bias.set_requires_grad(true);
    layers.emplace_back(weight, bias);
  }
  const TensorList outs = gathered_linears(x, layers, group, ranks);
  EXPECT_EQ(group.gathers, 1);
  Tensor loss = Tensor();
  for (size_t i = 0; i < outs.size(); ++i) {
    const Tensor term = sum(mul(outs[i], testing::random_tensor(outs[i].shape(), 30 + i)));
    loss = loss.defined() ? add(loss, term) : term;
  }
  loss.backward(Tensor::full({1}, 1.0f));
  EXPECT_EQ(group.gathers, 2) << "backward gathers the sequence again";
  EXPECT_EQ(group.scatters, 1) << "one reduce-scatter for the three outputs";

  // The same on plain ops: the whole sequence is process 0's slice then process 1's.
  Tensor x0 = x.detach().clone(), x1 = x.detach().clone();
  x0.set_requires_grad(true), x1.set_requires_grad(true);
  const Tensor rows = reshape(concat({x0, x1}, 1), {b * s * ranks, w});
  Tensor ref_loss = Tensor();
  std::vector<std::pair<Tensor, Tensor>> ref_layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    Tensor weight = layers[i].first.detach().clone(), bias = layers[i].second.detach().clone();
    weight.set_requires_grad(true), bias.set_requires_grad(true);
    ref_layers.emplace_back(weight, bias);
    const Tensor y = reshape(linear(rows, weight, bias), outs[i].shape());
    testing::expect_near(y.to_vector(), outs[i].to_vector(), 1e-6f);
    const Tensor term = sum(mul(y, testing::random_tensor(y.shape(), 30 + i)));
    ref_loss = ref_loss.defined() ? add(ref_loss, term) : term;
  }
  ref_loss.backward(Tensor::full({1}, 1.0f));
  for (size_t i = 0; i < layers.size(); ++i) {
    testing::expect_near(layers[i].first.grad().to_vector(), ref_layers[i].first.grad().to_vector(), 1e-5f);
    testing::expect_near(layers[i].second.grad().to_vector(), ref_layers[i].second.grad().to_vector(), 1e-5f);
  }
  // Process 0's gradient: the sum over the processes of the gradient at its positions.
  Tensor expected = x0.grad().clone();
  scale_(expected, static_cast<float>(ranks));
  testing::expect_near(x.grad().to_vector(), expected.to_vector(), 1e-5f);
}

}  // namespace
}  // namespace quartet::engine

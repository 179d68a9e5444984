#include <gtest/gtest.h>

#include <vector>

#include "engine/ops.h"

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

}  // namespace
}  // namespace quartet::engine

#include <gtest/gtest.h>

#include <initializer_list>
#include <stdexcept>
#include <string>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::gradcheck;
using testing::param;
using testing::random_tensor;
using testing::throws_invalid_argument;

TEST(Concat, ChannelsOfEachSampleFollowOneAnother) {
  // a: 2 samples x 1 channel x 2 cells, b: 2 samples x 2 channels x 2 cells.
  Tensor a = Tensor::from_vector({2, 1, 2}, {1, 2, 3, 4});
  Tensor b = Tensor::from_vector({2, 2, 2}, {10, 11, 12, 13, 20, 21, 22, 23});
  Tensor y = concat({a, b});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 2, 10, 11, 12, 13, 3, 4, 20, 21, 22, 23}));
}

TEST(Concat, AlongTheBatchAppendsSamples) {
  Tensor y = concat({Tensor::from_vector({1, 2}, {1, 2}), Tensor::from_vector({2, 2}, {3, 4, 5, 6})}, 0);
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(Concat, NegativeDimCountsFromTheEnd) {
  Tensor y = concat({Tensor::from_vector({2, 1}, {1, 2}), Tensor::from_vector({2, 2}, {3, 4, 5, 6})}, -1);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 3, 4, 2, 5, 6}));
}

TEST(Concat, GradientsOfChannelConcat2dMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return concat(in, 1); },
                        {param({2, 1, 3, 5}, 1), param({2, 3, 3, 5}, 2), param({2, 2, 3, 5}, 3)}));
}

TEST(Concat, GradientsOfChannelConcat3dMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return concat(in, 1); },
                        {param({1, 2, 3, 2, 3}, 1), param({1, 1, 3, 2, 3}, 2)}));
}

TEST(Concat, OnlyInputsThatRequireGradGetOne) {
  Tensor a = param({1, 1, 2}, 1), b = random_tensor({1, 2, 2}, 2);
  sum(concat({a, b})).backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{1, 1}));
  EXPECT_FALSE(b.grad().defined());
}

TEST(Concat, RejectsAnEmptyList) {
  EXPECT_TRUE(throws_invalid_argument([] { concat({}); }, {"concat: needs at least one tensor"}));
}

TEST(Concat, RejectsSizesThatDifferOutsideTheDim) {
  EXPECT_TRUE(throws_invalid_argument(
      [] { concat({Tensor::zeros({2, 3, 4, 4}), Tensor::zeros({2, 5, 4, 3})}); },
      {"concat: input 1 [2, 5, 4, 3] does not match input 0 [2, 3, 4, 4] outside dim 1"}));
}

TEST(Concat, RejectsInputsOfDifferentRank) {
  EXPECT_TRUE(throws_invalid_argument([] { concat({Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 3})}); },
                                      {"concat", "[2, 3]", "[2, 3, 4]"}));
}

TEST(Concat, RejectsDimOutOfRange) {
  EXPECT_TRUE(throws_invalid_argument([] { concat({Tensor::zeros({2, 3})}, 2); },
                                      {"concat: dim 2 out of range", "[2, 3]"}));
}

}  // namespace
}  // namespace quartet::engine

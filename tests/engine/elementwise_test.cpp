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

TEST(Elementwise, ForwardValues) {
  Tensor a = Tensor::from_vector({3}, {-1, 0, 2});
  Tensor b = Tensor::from_vector({3}, {4, 5, 6});
  EXPECT_EQ(add(a, b).to_vector(), (std::vector<float>{3, 5, 8}));
  EXPECT_EQ(mul(a, b).to_vector(), (std::vector<float>{-4, 0, 12}));
  EXPECT_EQ(scale(a, 2).to_vector(), (std::vector<float>{-2, 0, 4}));
  EXPECT_EQ(relu(a).to_vector(), (std::vector<float>{0, 0, 2}));
  EXPECT_FLOAT_EQ(sum(b).item(), 15.0f);
  EXPECT_FLOAT_EQ(mean(b).item(), 5.0f);
}

TEST(Elementwise, GradientsMatchFiniteDifferencesOnOddShapes) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return add(in[0], in[1]); }, {param({3, 5, 7}, 1), param({3, 5, 7}, 2)}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return mul(in[0], in[1]); }, {param({2, 3, 5}, 3), param({2, 3, 5}, 4)}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return scale(in[0], -1.5f); }, {param({7}, 5)}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return mean(in[0]); }, {param({3, 3}, 6)}));
}

TEST(Elementwise, ReluPassesNaNThroughAsPyTorchDoes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> y = relu(Tensor::from_vector({4}, {nan, -0.0f, -2.0f, 3.0f})).to_vector();
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_FALSE(std::signbit(y[1]));
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 3.0f);
}

// Past 2^16 elements relu goes to the threads in slices of whole 32-element mask words;
// an element count that is no multiple of 32 leaves a partial last word.
TEST(Elementwise, ReluOnThreadsEqualsOneThreadAndTheFormula) {
  const Shape shape{3, 7, 64, 73};  // 98,112 elements: 3,066 words, the last one partial
  auto run = [&](int threads) {
    testing::ThreadsScope scope(threads);
    Tensor x = param(shape, 5);
    Tensor y = relu(x);
    y.backward(random_tensor(shape, 6));
    return std::pair{y.to_vector(), x.grad().to_vector()};
  };
  const auto one = run(1), two = run(2);
  EXPECT_EQ(one, two);
  const std::vector<float> x = param(shape, 5).to_vector(), g = random_tensor(shape, 6).to_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(two.first[i], x[i] > 0.0f ? x[i] : 0.0f) << i;
    ASSERT_EQ(two.second[i], x[i] > 0.0f ? g[i] : 0.0f) << i;
  }
}

TEST(Elementwise, ReluGradientMatchesFiniteDifferencesAwayFromZero) {
  // Values at least 0.1 from the kink, so ±eps never crosses it.
  Tensor x = Tensor::from_vector({2, 3}, {-0.5f, 0.3f, 0.7f, -0.2f, 1.1f, -0.9f});
  x.set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return relu(in[0]); }, {x}));
}

TEST(Elementwise, MismatchedShapesAreRefusedNamingBoth) {
  try {
    add(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}));
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3] and [3, 2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mul(Tensor::zeros({2}), Tensor::zeros({3})), std::invalid_argument);
}

TEST(Shape, ReshapeSharesStorageAndInfersOneSize) {
  Tensor a = Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = reshape(a, {3, -1});
  EXPECT_EQ(b.shape(), (Shape{3, 2}));
  EXPECT_EQ(b.data(), a.data());
}

TEST(Shape, FlattenCollapsesTrailingDims) {
  EXPECT_EQ(flatten(Tensor::zeros({4, 3, 5, 7})).shape(), (Shape{4, 105}));
  EXPECT_EQ(flatten(Tensor::zeros({4, 3, 5, 7}), 2).shape(), (Shape{4, 3, 35}));
}

TEST(Shape, ReshapeGradientFlowsBackInTheInputShape) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return reshape(in[0], {5, 3}); }, {param({3, 5}, 9)}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return flatten(in[0]); }, {param({2, 3, 5}, 9)}));
}

TEST(Shape, BadReshapesAreRefused) {
  EXPECT_THROW(reshape(Tensor::zeros({2, 3}), {4, 2}), std::invalid_argument);
  EXPECT_THROW(reshape(Tensor::zeros({2, 3}), {-1, -1}), std::invalid_argument);
  EXPECT_THROW(reshape(Tensor::zeros({2, 3}), {1, 1, 1, 1, 2, 3}), std::invalid_argument);
  EXPECT_THROW(flatten(Tensor::zeros({2, 3}), 2), std::invalid_argument);
}

TEST(Tensor, MoreThanFiveDimsOrNegativeSizesAreRefused) {
  EXPECT_THROW(Tensor::zeros({1, 1, 1, 1, 1, 1}), std::invalid_argument);
  EXPECT_THROW(Tensor::zeros({2, -1}), std::invalid_argument);
  EXPECT_THROW(Tensor::from_vector({2, 2}, {1, 2, 3}), std::invalid_argument);
}

TEST(Tensor, AskingForCudaWithoutABackendIsOneClearError) {
  try {
    Tensor::zeros({2}, Device::cuda(0));
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace quartet::engine

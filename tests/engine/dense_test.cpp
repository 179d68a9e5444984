#include <gtest/gtest.h>

#include "engine/ops.h"
#include "tests/engine/gradcheck.h"

namespace quartet::engine {
namespace {

using testing::gradcheck;
using testing::param;
using testing::random_tensor;

TEST(Dense, MatmulForwardMatchesHandComputedValues) {
  Tensor a = Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::from_vector({3, 2}, {7, 8, 9, 10, 11, 12});
  EXPECT_EQ(matmul(a, b).to_vector(), (std::vector<float>{58, 64, 139, 154}));
}

TEST(Dense, LinearForwardUsesOutInWeightLayoutAndBias) {
  Tensor x = Tensor::from_vector({1, 2}, {1, 2});
  Tensor w = Tensor::from_vector({3, 2}, {1, 0, 0, 1, 1, 1});  // (out=3, in=2)
  Tensor b = Tensor::from_vector({3}, {10, 20, 30});
  EXPECT_EQ(linear(x, w, b).to_vector(), (std::vector<float>{11, 22, 33}));
}

TEST(Dense, MatmulGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return matmul(in[0], in[1]); },
                        {param({3, 5}, 1), param({5, 7}, 2)}));
}

TEST(Dense, LinearGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return linear(in[0], in[1], in[2]); },
                        {param({5, 7}, 1), param({3, 7}, 2), param({3}, 3)}));
}

TEST(Dense, LinearWithoutBiasGradientsMatchFiniteDifferences) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return linear(in[0], in[1], Tensor()); },
                        {param({4, 3}, 4), param({2, 3}, 5)}));
}

TEST(Dense, MatmulRejectsMismatchedInnerSizesNamingBothShapes) {
  try {
    matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 2}));
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3] x [4, 2]"), std::string::npos) << e.what();
  }
}

TEST(Dense, LinearRejectsWrongRankAndBadBias) {
  EXPECT_THROW(linear(Tensor::zeros({2, 3, 4}), Tensor::zeros({5, 3}), Tensor()), std::invalid_argument);
  EXPECT_THROW(linear(Tensor::zeros({2, 3}), Tensor::zeros({5, 3}), Tensor::zeros({4})), std::invalid_argument);
}

}  // namespace
}  // namespace quartet::engine

// Tensors and devices as code above the engine sees them: to(), explicit host copies,
// and the flat-buffer ops that communication buffers use. A build without CUDA has only
// the cpu: asking for a cuda tensor fails with a message naming the device.

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "engine/memory.h"
#include "engine/ops.h"
#include "engine/tensor.h"

namespace quartet::engine {
namespace {

TEST(Device, ToTheSameDeviceSharesTheStorage) {
  Tensor t = Tensor::from_vector({2, 2}, {1, 2, 3, 4});
  Tensor same = t.to(Device::cpu());
  EXPECT_TRUE(same.same(t));
  EXPECT_EQ(same.device_data(), t.data());
}

TEST(Device, ToACudaDeviceIsRefusedWithoutABackend) {
  if (device_available(Device::cuda(0))) GTEST_SKIP() << "this build has a CUDA backend";
  Tensor t = Tensor::zeros({3});
  try {
    t.to(Device::cuda(0));
    FAIL() << "expected a refusal";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

TEST(Device, HostCopiesGoBothWays) {
  Tensor t = Tensor::zeros({2, 3});
  t.copy_from_host(std::vector<float>{1, 2, 3, 4, 5, 6});
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_THROW(t.copy_from_host(std::vector<float>{1, 2}), std::invalid_argument);
}

TEST(Device, HostValuesOfACpuTensorAreItsStorage) {
  Tensor t = Tensor::from_vector({3}, {1, 2, 3});
  const HostValues v(t);
  EXPECT_EQ(v.span().data(), t.data());
  EXPECT_EQ(std::vector<float>(v.span().begin(), v.span().end()), (std::vector<float>{1, 2, 3}));
}

TEST(Device, UpdateOnHostKeepsWhatItWrote) {
  Tensor t = Tensor::from_vector({3}, {1, 2, 3});
  update_on_host(t, [](std::span<float> v) {
    for (float& x : v) x *= 2.0f;
  });
  EXPECT_EQ(t.to_vector(), (std::vector<float>{2, 4, 6}));
}

TEST(FlatBuffers, RangesCopyFillAndRound) {
  Tensor a = Tensor::from_vector({5}, {1, 2, 3, 4, 5});
  Tensor b = Tensor::zeros({4});
  copy_range(b, 1, a, 2, 3);
  EXPECT_EQ(b.to_vector(), (std::vector<float>{0, 3, 4, 5}));
  fill_range(b, 0, 2, 7.0f);
  EXPECT_EQ(b.to_vector(), (std::vector<float>{7, 7, 4, 5}));
  Tensor h = Tensor::from_vector({3}, {1.0f / 3.0f, 1.0f / 3.0f, 65520.0f});
  round_to_half_(h, 1, 2);
  EXPECT_EQ(h.to_vector()[0], 1.0f / 3.0f);                 // outside the range: untouched
  EXPECT_EQ(h.to_vector()[1], static_cast<float>(static_cast<_Float16>(1.0f / 3.0f)));
  EXPECT_NE(h.to_vector()[1], 1.0f / 3.0f);
}

TEST(FlatBuffers, RangesOutsideTheTensorAreRefused) {
  Tensor a = Tensor::zeros({4});
  Tensor b = Tensor::zeros({4});
  EXPECT_THROW(copy_range(b, 2, a, 0, 3), std::invalid_argument);
  EXPECT_THROW(copy_range(b, 0, a, -1, 1), std::invalid_argument);
  EXPECT_THROW(fill_range(b, 3, 2, 0.0f), std::invalid_argument);
  EXPECT_THROW(round_to_half_(b, 5, 0), std::invalid_argument);
}

TEST(FlatBuffers, SumOfSquaresAndScaleInPlace) {
  Tensor t = Tensor::from_vector({3}, {1, 2, 2});
  EXPECT_DOUBLE_EQ(sum_squares(t), 9.0);
  scale_(t, 0.5f);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{0.5f, 1.0f, 1.0f}));
}

}  // namespace
}  // namespace quartet::engine

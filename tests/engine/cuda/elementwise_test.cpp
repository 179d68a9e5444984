// The CUDA element-wise kernels against the CPU's: the ops forward and backward, the
// flat-buffer kernels, and copies between devices.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/cpu/elementwise.h"
#include "engine/cuda/elementwise.h"
#include "tests/engine/cuda/op_check.h"

namespace quartet::engine::cuda_test {
namespace {

using Inputs = std::vector<Tensor>;

// Shapes of 1 to 4 dims, sizes 1 to 9, one with an odd count past a few blocks.
std::vector<Shape> random_shapes(uint64_t seed) {
  Generator gen(seed);
  std::vector<Shape> shapes;
  for (int k = 0; k < 3; ++k) {
    Shape s(1 + gen.below(4));
    for (int64_t& d : s) d = 1 + static_cast<int64_t>(gen.below(9));
    shapes.push_back(s);
  }
  shapes.push_back({3, 1000, 7});
  return shapes;
}

// Same bits, so infinities and signed zeros count.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
}

TEST(CudaElementwise, AddAndMulMatchExactly) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 1;
  for (const Shape& s : random_shapes(11)) {
    const Inputs in = {random_tensor(s, seed++), random_tensor(s, seed++)};
    expect_same_on_gpu("add " + shape_str(s), in, [](const Inputs& v) { return add(v[0], v[1]); }, 0.0);
    expect_same_on_gpu("mul " + shape_str(s), in, [](const Inputs& v) { return mul(v[0], v[1]); }, 0.0);
  }
}

TEST(CudaElementwise, ScaleAndReluMatchExactly) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 20;
  for (const Shape& s : random_shapes(12)) {
    const Inputs in = {random_tensor(s, seed++)};
    expect_same_on_gpu("scale " + shape_str(s), in, [](const Inputs& v) { return scale(v[0], -0.37f); }, 0.0);
    expect_same_on_gpu("relu " + shape_str(s), in, [](const Inputs& v) { return relu(v[0]); }, 0.0);
  }
}

TEST(CudaElementwise, ReluPassesNanLikeTheCpu) {
  QUARTET_NEED_GPU(1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::from_vector({4}, {nan, -1.0f, 0.0f, 2.0f});
  const std::vector<float> y = relu(x.to(kGpu)).to_vector();
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 2.0f);
}

TEST(CudaElementwise, SumsAgreeWithTheCpuAndRepeat) {
  QUARTET_NEED_GPU(1);
  for (const Shape& s : {Shape{1}, Shape{257}, Shape{3, 1000, 7}, Shape{64, 64, 64}}) {
    const Tensor x = random_tensor(s, 31);
    const Tensor d = x.to(kGpu);
    const double host = cpu::sum_squares(x), device = cuda::sum_squares(d);
    EXPECT_NEAR(device, host, 1e-10 * (1.0 + host)) << "sum_squares " << shape_str(s);
    EXPECT_EQ(cuda::sum_squares(d), device) << "sum_squares repeats " << shape_str(s);
    EXPECT_EQ(sum_squares(d), device) << "the op dispatches " << shape_str(s);
    const float hs = cpu::sum(x), ds = cuda::sum(d);
    EXPECT_NEAR(ds, hs, 1e-6 * (1.0 + std::abs(hs))) << "sum " << shape_str(s);
    EXPECT_EQ(cuda::sum(d), ds) << "sum repeats " << shape_str(s);
    std::printf("[ op ] sum %s: %.9g vs %.9g; sum_squares %.17g vs %.17g\n", shape_str(s).c_str(), hs, ds, host,
                device);
  }
  EXPECT_EQ(cuda::sum(Tensor::empty({0}, kGpu)), 0.0f);
}

TEST(CudaElementwise, FillFromScalarAndFill) {
  QUARTET_NEED_GPU(1);
  const Tensor scalar = Tensor::from_vector({1}, {3.0f}).to(kGpu);
  Tensor out = Tensor::empty({5, 7}, kGpu);
  cuda::fill_from_scalar(scalar, 0.25f, out);
  for (float v : out.to_vector()) EXPECT_EQ(v, 0.75f);
  out.fill_(-2.0f);
  for (float v : out.to_vector()) EXPECT_EQ(v, -2.0f);
}

TEST(CudaElementwise, CopiesBetweenDevicesKeepEveryBit) {
  QUARTET_NEED_GPU(1);
  const Tensor x = random_tensor({3, 1000, 7}, 41);
  const Tensor d = x.to(kGpu);  // host to device
  const Tensor d2 = d.clone();  // device to device
  Tensor back = Tensor::empty(x.shape());
  back.copy_from(d2);  // device to host
  expect_same_bits(back.to_vector(), x.to_vector(), "round trip");
  Tensor d3 = Tensor::zeros(x.shape(), kGpu);
  d3.copy_from(d);
  expect_same_bits(d3.to_vector(), x.to_vector(), "copy_from on the device");
}

TEST(CudaElementwise, FlatBufferKernelsMatchTheCpu) {
  QUARTET_NEED_GPU(1);
  // Around fp16's limits: 65519 rounds down to 65504, 65520 ties up to inf, tiny values
  // to subnormals or zero.
  std::vector<float> values = {65519.0f, 65520.0f, -70000.0f, 1e-7f, 2.9e-8f, 3.0e-8f, -0.0f, 1.0f / 3.0f};
  Generator gen(5);
  for (int i = 0; i < 3000; ++i) values.push_back(gen.uniform(-2.0f, 2.0f));
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor h = Tensor::from_vector({n}, values);
  Tensor d = h.to(kGpu);
  const Tensor src = random_tensor({n}, 43);
  const Tensor src_d = src.to(kGpu);
  for (Tensor* t : {&h, &d}) {
    round_to_half_(*t, 0, n - 100);
    fill_range(*t, n - 100, 40, -5.5f);
    copy_range(*t, n - 60, t->device().is_cpu() ? src : src_d, 17, 50);
    scale_(*t, 0.5f);
  }
  expect_same_bits(d.to_vector(), h.to_vector(), "round_to_half_, fill_range, copy_range, scale_");
  std::printf("[ op ] round_to_half_, fill_range, copy_range, scale_ %lld values: same bits\n",
              static_cast<long long>(n));
}

}  // namespace
}  // namespace quartet::engine::cuda_test

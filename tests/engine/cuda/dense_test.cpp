// The CUDA dense kernels against the CPU's: matmul and linear forward and backward,
// gemm with every transpose and alpha / beta, and the bias kernels, whose column sums
// must repeat bit for bit. GEMMs sum in another order than Eigen: 1e-4 relative.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/cpu/dense.h"
#include "engine/cuda/dense.h"
#include "tests/engine/cuda/op_check.h"

namespace quartet::engine::cuda_test {
namespace {

using Inputs = std::vector<Tensor>;

constexpr double kGemmTolerance = 1e-4;

// (M, K, N) triples: tiny, odd, past a tile, and one with a long inner dimension.
std::vector<std::vector<int64_t>> random_sizes(uint64_t seed) {
  Generator gen(seed);
  std::vector<std::vector<int64_t>> sizes;
  for (int i = 0; i < 3; ++i)
    sizes.push_back({1 + static_cast<int64_t>(gen.below(70)), 1 + static_cast<int64_t>(gen.below(70)),
                     1 + static_cast<int64_t>(gen.below(70))});
  sizes.push_back({1, 1, 1});
  sizes.push_back({129, 1000, 65});
  return sizes;
}

TEST(CudaDense, MatmulMatchesCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 1;
  for (const auto& s : random_sizes(3)) {
    const Inputs in = {random_tensor({s[0], s[1]}, seed++), random_tensor({s[1], s[2]}, seed++)};
    expect_same_on_gpu("matmul " + shape_str(s), in, [](const Inputs& v) { return matmul(v[0], v[1]); },
                       kGemmTolerance);
  }
}

TEST(CudaDense, LinearWithAndWithoutBiasMatchesCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 20;
  for (const auto& s : random_sizes(4)) {
    // x (N, in), weight (out, in), bias (out).
    const Inputs in = {random_tensor({s[0], s[1]}, seed++), random_tensor({s[2], s[1]}, seed++),
                       random_tensor({s[2]}, seed++)};
    expect_same_on_gpu("linear " + shape_str(s), in, [](const Inputs& v) { return linear(v[0], v[1], v[2]); },
                       kGemmTolerance);
    expect_same_on_gpu("linear without bias " + shape_str(s), {in[0], in[1]},
                       [](const Inputs& v) { return linear(v[0], v[1], Tensor()); }, kGemmTolerance);
  }
}

// Every transpose pair with alpha and beta, out holding values to scale; and beta = 0
// over an out full of NaN, which must not leak through.
TEST(CudaDense, GemmTransposesAlphaAndBeta) {
  QUARTET_NEED_GPU(1);
  const int64_t m = 37, k = 53, n = 29;
  uint64_t seed = 40;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, seed++);
      const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, seed++);
      for (float beta : {0.0f, 0.25f, 1.0f}) {
        const Tensor start = beta == 0.0f ? Tensor::full({m, n}, std::numeric_limits<float>::quiet_NaN())
                                          : random_tensor({m, n}, seed++);
        Tensor host = start.clone();
        Tensor device = start.to(kGpu);
        cpu::gemm(a, ta, b, tb, host, 0.5f, beta);
        cuda::gemm(a.to(kGpu), ta, b.to(kGpu), tb, device, 0.5f, beta);
        const double d = max_rel_diff(host, device);
        EXPECT_LE(d, kGemmTolerance) << "trans_a " << ta << " trans_b " << tb << " beta " << beta;
      }
    }
}

TEST(CudaDense, RowBiasAndColumnSumsMatchCpuAndRepeat) {
  QUARTET_NEED_GPU(1);
  for (const Shape& s : {Shape{1, 1}, Shape{7, 13}, Shape{4096, 10}, Shape{3, 5000}, Shape{70000, 3}}) {
    const Tensor x = random_tensor(s, 61), bias = random_tensor({s[1]}, 62);
    Tensor host = x.clone();
    Tensor device = x.to(kGpu);
    cpu::add_row_bias(host, bias);
    cuda::add_row_bias(device, bias.to(kGpu));
    EXPECT_EQ(max_rel_diff(host, device), 0.0) << "add_row_bias " << shape_str(s);

    Tensor sums_host = Tensor::empty({s[1]});
    Tensor sums_device = Tensor::empty({s[1]}, kGpu), again = Tensor::empty({s[1]}, kGpu);
    cpu::sum_rows(x, sums_host);
    const Tensor xd = x.to(kGpu);
    cuda::sum_rows(xd, sums_device);
    cuda::sum_rows(xd, again);
    // The CPU adds in float, the GPU in double: within float rounding of the row count.
    EXPECT_LE(max_rel_diff(sums_host, sums_device), 1e-5 * std::sqrt(static_cast<double>(s[0])))
        << "sum_rows " << shape_str(s);
    const std::vector<float> first = sums_device.to_vector(), second = again.to_vector();
    for (size_t i = 0; i < first.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(first[i]), std::bit_cast<uint32_t>(second[i])) << "sum_rows repeats";
  }
}

}  // namespace
}  // namespace quartet::engine::cuda_test

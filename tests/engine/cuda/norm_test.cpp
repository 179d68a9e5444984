// The CUDA batch and group norm kernels against the CPU's: training and eval forward and
// backward over (N, C) to (N, C, D, H, W), the running statistics, the sums around a
// given shift (SyncBatchNorm's path), and per-channel sums that repeat bit for bit even
// when a channel is split into many parts. Both sides sum in double; the element-wise
// float steps may differ by a fused multiply-add: 1e-5 relative.
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/cuda/norm.h"
#include "tests/engine/cuda/op_check.h"

namespace quartet::engine::cuda_test {
namespace {

using Inputs = std::vector<Tensor>;

constexpr double kNormTolerance = 1e-5;

std::vector<Shape> shapes() {
  return {{8, 5}, {4, 3, 17}, {2, 6, 9, 7}, {2, 4, 5, 6, 7}, {2, 4, 64, 64, 32}};
}

// A process alone in its data-parallel arm: the sums stay as they are, but batch_norm
// takes the shift-by-running-mean path that SyncBatchNorm uses.
class LoneReducer : public StatsReducer {
 public:
  void all_reduce_sum(Tensor&) override {}
};

TEST(CudaNorm, BatchNormTrainingMatchesCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 1;
  for (const Shape& s : shapes()) {
    const int64_t c = s[1];
    const Inputs in = {random_tensor(s, seed++, -2.0f, 3.0f), random_tensor({c}, seed++), random_tensor({c}, seed++)};
    expect_same_on_gpu("batch_norm train " + shape_str(s), in,
                       [c](const Inputs& v) {
                         Tensor rm = Tensor::zeros({c}, v[0].device()), rv = Tensor::full({c}, 1.0f, v[0].device());
                         return batch_norm(v[0], v[1], v[2], rm, rv, true);
                       },
                       kNormTolerance);
    expect_same_on_gpu("batch_norm train without affine " + shape_str(s), {in[0]},
                       [c](const Inputs& v) {
                         Tensor rm = Tensor::zeros({c}, v[0].device()), rv = Tensor::full({c}, 1.0f, v[0].device());
                         return batch_norm(v[0], Tensor(), Tensor(), rm, rv, true);
                       },
                       kNormTolerance);
  }
}

// Running statistics after a few steps, with and without a reducer (shift = running mean).
TEST(CudaNorm, RunningStatisticsMatchCpu) {
  QUARTET_NEED_GPU(1);
  LoneReducer reducer;
  for (StatsReducer* r : {static_cast<StatsReducer*>(nullptr), static_cast<StatsReducer*>(&reducer)}) {
    const Shape s{4, 3, 6, 5};
    Tensor rm_h = random_tensor({3}, 11), rv_h = random_tensor({3}, 12, 0.5f, 2.0f);
    Tensor rm_d = rm_h.to(kGpu), rv_d = rv_h.to(kGpu);
    for (uint64_t step = 0; step < 3; ++step) {
      const Tensor x = random_tensor(s, 20 + step, -1.0f, 4.0f);
      const BatchNormOptions opt{.momentum = 0.3f, .reducer = r};
      const Tensor yh = batch_norm(x, Tensor(), Tensor(), rm_h, rv_h, true, opt);
      const Tensor yd = batch_norm(x.to(kGpu), Tensor(), Tensor(), rm_d, rv_d, true, opt);
      EXPECT_LE(max_rel_diff(yh, yd), kNormTolerance) << "output, reducer " << (r != nullptr);
    }
    EXPECT_LE(max_rel_diff(rm_h, rm_d), kNormTolerance) << "running mean, reducer " << (r != nullptr);
    EXPECT_LE(max_rel_diff(rv_h, rv_d), kNormTolerance) << "running var, reducer " << (r != nullptr);
  }
}

TEST(CudaNorm, BatchNormEvalMatchesCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 40;
  for (const Shape& s : shapes()) {
    const int64_t c = s[1];
    const Tensor rm = random_tensor({c}, seed++), rv = random_tensor({c}, seed++, 0.5f, 2.0f);
    const Inputs in = {random_tensor(s, seed++), random_tensor({c}, seed++), random_tensor({c}, seed++)};
    expect_same_on_gpu("batch_norm eval " + shape_str(s), in,
                       [rm, rv](const Inputs& v) {
                         Tensor m = rm.to(v[0].device()), var = rv.to(v[0].device());
                         return batch_norm(v[0], v[1], v[2], m, var, false);
                       },
                       kNormTolerance);
  }
}

TEST(CudaNorm, GroupNormMatchesCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 80;
  for (const Shape& s : shapes()) {
    const int64_t c = s[1];
    for (int64_t groups : {int64_t{1}, c % 2 == 0 ? int64_t{2} : int64_t{1}, c}) {
      const Inputs in = {random_tensor(s, seed++, -1.0f, 2.0f), random_tensor({c}, seed++),
                         random_tensor({c}, seed++)};
      const std::string name = "group_norm " + shape_str(s) + " groups " + std::to_string(groups);
      expect_same_on_gpu(name, in, [groups](const Inputs& v) { return group_norm(v[0], groups, v[1], v[2]); },
                         kNormTolerance);
      expect_same_on_gpu(name + " without affine", {in[0]},
                         [groups](const Inputs& v) { return group_norm(v[0], groups, Tensor(), Tensor()); },
                         kNormTolerance);
    }
  }
}

// The sums kernels twice over a tensor whose channels split into many parts: the same
// bits, and the count exact.
TEST(CudaNorm, ChannelSumsRepeatBitForBit) {
  QUARTET_NEED_GPU(1);
  const Shape s{2, 4, 64, 64, 32};
  const Tensor x = random_tensor(s, 120, -1.0f, 3.0f).to(kGpu);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    Tensor shift = Tensor::empty({4}, kGpu), sums = Tensor::empty({3, 4}, kGpu);
    cuda::batch_norm_sums(x, true, shift, sums);
    std::vector<float> v = sums.to_vector();
    const std::vector<float> k = shift.to_vector();
    v.insert(v.end(), k.begin(), k.end());
    if (run == 0) {
      first = v;
      for (int c = 0; c < 4; ++c) EXPECT_EQ(v[static_cast<size_t>(8 + c)], 2.0f * 64 * 64 * 32);
      continue;
    }
    for (size_t i = 0; i < v.size(); ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(v[i]), std::bit_cast<uint32_t>(first[i])) << "value " << i;
  }
}

}  // namespace
}  // namespace quartet::engine::cuda_test

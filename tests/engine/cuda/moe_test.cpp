// The CUDA mixture-of-experts kernels against the CPU's, forward and backward: softmax,
// log-sum-exp and the top-k gates (double sums on both sides), the weighted combine of expert rows
// (float sums in the same order) and the row gather (embedding's kernels).
#include <string>
#include <vector>

#include "tests/engine/cuda/op_check.h"

namespace quartet::engine::cuda_test {
namespace {

using Inputs = std::vector<Tensor>;

TEST(CudaMoe, SoftmaxMatchesCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 40;
  for (const Shape& s : std::vector<Shape>{{3, 4}, {512, 8}, {2, 7, 64}})
    expect_same_on_gpu("softmax " + shape_str(s), {random_tensor(s, seed++, -4.0f, 4.0f)},
                       [](const Inputs& v) { return softmax(v[0]); }, 1e-6);
}

TEST(CudaMoe, LogsumexpMatchesCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 45;
  for (const Shape& s : std::vector<Shape>{{3, 4}, {512, 8}, {2, 7, 64}})
    expect_same_on_gpu("logsumexp " + shape_str(s), {random_tensor(s, seed++, -4.0f, 4.0f)},
                       [](const Inputs& v) { return logsumexp(v[0]); }, 1e-6);
}

TEST(CudaMoe, TopKGatesMatchCpu) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 50;
  for (int64_t k : {1, 2})
    for (bool normalize : {false, true})
      expect_same_on_gpu("top_k_gates k " + std::to_string(k) + (normalize ? " normalised" : ""),
                         {random_tensor({300, 8}, seed++, 0.0f, 1.0f)},
                         [&](const Inputs& v) { return top_k_gates(v[0], k, normalize).gates; }, 1e-6);
}

TEST(CudaMoe, CombineAndGatherRowsMatchCpu) {
  QUARTET_NEED_GPU(1);
  // 100 tokens, two choices each; every third second choice dropped; slots a permutation.
  std::vector<int32_t> slots;
  int32_t next = 0;
  for (int r = 0; r < 100; ++r) {
    slots.push_back(next++);
    slots.push_back(r % 3 == 0 ? -1 : next++);
  }
  std::vector<int32_t> reversed(slots.rbegin(), slots.rend());
  expect_same_on_gpu("combine_rows", {random_tensor({next, 48}, 60), random_tensor({100, 2}, 61, 0.0f, 1.0f)},
                     [&](const Inputs& v) { return combine_rows(v[0], v[1], reversed); }, 1e-6);
  std::vector<int32_t> rows;
  for (int i = 0; i < 150; ++i) rows.push_back(i * 7 % 100);
  expect_same_on_gpu("gather_rows", {random_tensor({100, 48}, 62)},
                     [&](const Inputs& v) { return gather_rows(v[0], rows); }, 1e-6);
}

}  // namespace
}  // namespace quartet::engine::cuda_test

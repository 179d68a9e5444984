// The CUDA broadcasting and layout kernels against the CPU's, forward and backward.
#include <vector>

#include "engine/ops.h"
#include "tests/engine/cuda/op_check.h"

namespace quartet::engine::cuda_test {
namespace {

using Inputs = std::vector<Tensor>;

TEST(CudaBroadcast, BinaryOpsMatchTheCpu) {
  QUARTET_NEED_GPU(1);
  const Inputs in = {random_tensor({2, 3, 4, 5}, 1), random_tensor({3, 1, 5}, 2, 0.5f, 1.5f)};
  expect_same_on_gpu("add", in, [](const Inputs& v) { return add(v[0], v[1]); }, 0.0);
  expect_same_on_gpu("sub", in, [](const Inputs& v) { return sub(v[0], v[1]); }, 0.0);
  expect_same_on_gpu("mul", in, [](const Inputs& v) { return mul(v[0], v[1]); }, 0.0);
  expect_same_on_gpu("div", in, [](const Inputs& v) { return div(v[0], v[1]); }, 1e-6);
}

TEST(CudaBroadcast, LayoutOpsMatchTheCpu) {
  QUARTET_NEED_GPU(1);
  const Inputs in = {random_tensor({2, 3, 4, 5}, 3)};
  expect_same_on_gpu("transpose", in, [](const Inputs& v) { return transpose(v[0], {3, 1, 0, 2}); }, 0.0);
  expect_same_on_gpu("pad", in, [](const Inputs& v) { return pad(v[0], {0, 1, 2, 0}, {1, 0, 1, 3}, 0.5f); }, 0.0);
  expect_same_on_gpu("narrow", in, [](const Inputs& v) { return narrow(v[0], 2, 1, 2); }, 0.0);
  expect_same_on_gpu("clip", in, [](const Inputs& v) { return clip(v[0], -0.5f, 0.5f); }, 0.0);
  expect_same_on_gpu("expand", {random_tensor({3, 1, 5}, 4)},
                     [](const Inputs& v) { return expand(v[0], {2, 3, 4, 5}); }, 0.0);
}

TEST(CudaBroadcast, WhereAndGatherMatchTheCpu) {
  QUARTET_NEED_GPU(1);
  const Tensor cond = Tensor::from_vector({3, 1, 5}, {1, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 1, 1, 1, 0});
  // cond travels with the inputs but takes no gradient: where records none for it.
  expect_same_on_gpu("where", {cond, random_tensor({2, 3, 4, 5}, 7), random_tensor({4, 1}, 8)},
                     [](const Inputs& v) { return where(v[0], v[1], v[2]); }, 0.0);
  expect_same_on_gpu("gather", {random_tensor({2, 3, 4, 5}, 9)},
                     [](const Inputs& v) { return gather(v[0], 2, {3, -1, 0, 3, 1, 0}, {2, 3}); }, 1e-6);
}

TEST(CudaBroadcast, BatchedMatmulMatchesTheCpu) {
  QUARTET_NEED_GPU(1);
  const Inputs in = {random_tensor({2, 3, 4, 5}, 5), random_tensor({3, 5, 6}, 6)};
  expect_same_on_gpu("batched_matmul", in, [](const Inputs& v) { return batched_matmul(v[0], v[1]); }, 1e-5);
}

}  // namespace
}  // namespace quartet::engine::cuda_test

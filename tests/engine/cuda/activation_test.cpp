// The CUDA activations and dropout against the CPU's, forward and backward.
#include <vector>

#include "tests/engine/cuda/op_check.h"

namespace quartet::engine::cuda_test {
namespace {

using Inputs = std::vector<Tensor>;

const std::vector<Shape> kShapes = {{7}, {4, 9}, {2, 3, 5, 6}, {3, 1000, 7}};

TEST(CudaActivation, LeakyReluMatchesExactly) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 1;
  for (const Shape& s : kShapes)
    expect_same_on_gpu("leaky_relu " + shape_str(s), {random_tensor(s, seed++)},
                       [](const Inputs& v) { return leaky_relu(v[0], 0.1f); }, 0.0);
}

// expf and tanhf differ from the host's libm by an ulp or two.
TEST(CudaActivation, SigmoidMatchesOverAWideRange) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 10;
  for (const Shape& s : kShapes)
    expect_same_on_gpu("sigmoid " + shape_str(s), {random_tensor(s, seed++, -40.0f, 40.0f)},
                       [](const Inputs& v) { return sigmoid(v[0]); }, 2e-6);
}

TEST(CudaActivation, TanhMatches) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 20;
  for (const Shape& s : kShapes)
    expect_same_on_gpu("tanh " + shape_str(s), {random_tensor(s, seed++, -5.0f, 5.0f)},
                       [](const Inputs& v) { return tanh(v[0]); }, 2e-6);
}

TEST(CudaActivation, ErfMatches) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 30;
  for (const Shape& s : kShapes)
    expect_same_on_gpu("erf " + shape_str(s), {random_tensor(s, seed++, -4.0f, 4.0f)},
                       [](const Inputs& v) { return erf(v[0]); }, 2e-6);
}

// The mask is drawn on the host in both: one seed, one mask, the same values.
TEST(CudaActivation, DropoutDrawsTheCpuMask) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 30;
  for (const Shape& s : kShapes)
    for (float p : {0.1f, 0.5f})
      expect_same_on_gpu("dropout p=" + std::to_string(p) + " " + shape_str(s), {random_tensor(s, seed++)},
                         [p](const Inputs& v) {
                           Generator gen(99);
                           return dropout(v[0], p, gen);
                         },
                         0.0);
}

}  // namespace
}  // namespace quartet::engine::cuda_test

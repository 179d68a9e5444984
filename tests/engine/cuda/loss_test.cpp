// The CUDA losses against the CPU's: the loss and the gradient of every input. The sums
// run in double on both devices, in different orders, so losses agree to float rounding.
#include <vector>

#include "tests/engine/cuda/op_check.h"

namespace quartet::engine::cuda_test {
namespace {

using Inputs = std::vector<Tensor>;

std::vector<int32_t> random_targets(const Shape& logits, uint64_t seed) {
  Generator gen(seed);
  std::vector<int32_t> t(static_cast<size_t>(shape_numel(logits) / logits[1]));
  for (int32_t& v : t) v = static_cast<int32_t>(gen.below(static_cast<uint64_t>(logits[1])));
  return t;
}

// (N, C) and (N, C, *spatial); the last past one Dice chunk (8192 positions) per sample.
const std::vector<Shape> kClassShapes = {{5, 7}, {3, 4, 9, 10}, {2, 3, 4, 5, 6}, {2, 3, 100, 100}};

TEST(CudaLoss, CrossEntropyMatches) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 1;
  for (const Shape& s : kClassShapes)
    for (bool weighted : {false, true}) {
      const std::vector<int32_t> t = random_targets(s, seed);
      std::vector<float> w;
      if (weighted)
        for (int64_t c = 0; c < s[1]; ++c) w.push_back(0.5f + 0.25f * static_cast<float>(c));
      expect_same_on_gpu("cross_entropy " + shape_str(s) + (weighted ? " weighted" : ""),
                         {random_tensor(s, seed++, -4.0f, 4.0f)},
                         [&](const Inputs& v) { return cross_entropy(v[0], t, w); }, 1e-5);
    }
}

TEST(CudaLoss, BceWithLogitsMatches) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 20;
  for (const Shape& s : {Shape{7}, Shape{4, 9}, Shape{3, 1000, 7}}) {
    expect_same_on_gpu("bce_with_logits " + shape_str(s),
                       {random_tensor(s, seed, -20.0f, 20.0f), random_tensor(s, seed + 1, 0.0f, 1.0f)},
                       [](const Inputs& v) { return bce_with_logits(v[0], v[1]); }, 1e-5);
    seed += 2;
  }
}

TEST(CudaLoss, MseMatches) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 40;
  for (const Shape& s : {Shape{7}, Shape{4, 9}, Shape{3, 1000, 7}}) {
    expect_same_on_gpu("mse_loss " + shape_str(s), {random_tensor(s, seed), random_tensor(s, seed + 1)},
                       [](const Inputs& v) { return mse_loss(v[0], v[1]); }, 1e-5);
    seed += 2;
  }
}

TEST(CudaLoss, SoftDiceMatches) {
  QUARTET_NEED_GPU(1);
  uint64_t seed = 60;
  for (const Shape& s : kClassShapes)
    for (bool per_sample : {false, true})
      for (bool background : {false, true}) {
        const std::vector<int32_t> t = random_targets(s, seed);
        expect_same_on_gpu("soft_dice_loss " + shape_str(s) + (per_sample ? " per_sample" : "") +
                               (background ? " with background" : ""),
                           {random_tensor(s, seed++, -3.0f, 3.0f)},
                           [&](const Inputs& v) { return soft_dice_loss(v[0], t, background, 1e-5f, per_sample); },
                           1e-5);
      }
}

// The device's sums are fixed-order: the same loss bit for bit on every run.
TEST(CudaLoss, LossesRepeatExactly) {
  QUARTET_NEED_GPU(1);
  const Shape s = {2, 3, 100, 100};
  const Tensor x = random_tensor(s, 80, -3.0f, 3.0f).to(kGpu);
  const Tensor y = random_tensor(s, 81, 0.0f, 1.0f).to(kGpu);
  const std::vector<int32_t> t = random_targets(s, 82);
  EXPECT_EQ(cross_entropy(x, t).item(), cross_entropy(x, t).item());
  EXPECT_EQ(soft_dice_loss(x, t, false, 1e-5f, true).item(), soft_dice_loss(x, t, false, 1e-5f, true).item());
  EXPECT_EQ(bce_with_logits(x, y).item(), bce_with_logits(x, y).item());
  EXPECT_EQ(mse_loss(x, y).item(), mse_loss(x, y).item());
}

}  // namespace
}  // namespace quartet::engine::cuda_test

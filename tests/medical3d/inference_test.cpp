#include "medical3d/inference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "engine/autograd.h"
#include "engine/nn.h"
#include "tests/medical3d/test_dir.h"

namespace quartet::medical3d {
namespace {

using testing::thrown_message;

TEST(WindowStarts, StepByWindowTimesOneMinusOverlapAndEndAtTheEdge) {
  EXPECT_EQ(window_starts(32, 16, 0.5), (std::vector<int64_t>{0, 8, 16}));
  EXPECT_EQ(window_starts(30, 16, 0.5), (std::vector<int64_t>{0, 8, 14}));
  EXPECT_EQ(window_starts(32, 16, 0.0), (std::vector<int64_t>{0, 16}));
  EXPECT_EQ(window_starts(32, 32, 0.5), (std::vector<int64_t>{0}));
}

TEST(WindowStarts, AWindowLargerThanTheVolumeIsCentred) {
  EXPECT_EQ(window_starts(10, 16, 0.5), (std::vector<int64_t>{-3}));
}

TEST(WindowStarts, BadArgumentsAreRefused) {
  EXPECT_NE(thrown_message<std::invalid_argument>([] { window_starts(8, 4, 1.0); }).find("overlap"),
            std::string::npos);
  EXPECT_NE(thrown_message<std::invalid_argument>([] { window_starts(0, 4, 0.5); }).find("size and window"),
            std::string::npos);
}

// A "model" whose logits are (x, -x, 1): each voxel's class-0 logit is its image value,
// wherever the window lies, so averaging over windows must give the image back.
class EchoModel : public engine::Model {
 public:
  engine::Tensor forward(const engine::Tensor& x) override {
    const int64_t n = x.size(0), v = x.numel() / n;
    engine::Tensor y = engine::Tensor::empty({n, 3, x.size(2), x.size(3), x.size(4)});
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < v; ++j) {
        const float a = x.data()[i * v + j];
        y.data()[(i * 3 + 0) * v + j] = a;
        y.data()[(i * 3 + 1) * v + j] = -a;
        y.data()[(i * 3 + 2) * v + j] = 1.0f;
      }
    ++calls;
    return y;
  }
  int calls = 0;
};

Volume ramp(Dims3 dims) {
  Grid g;
  g.dims = dims;
  Volume v(g);
  for (size_t i = 0; i < v.voxels.size(); ++i) v.voxels[i] = static_cast<float>(i % 97) / 10.0f - 4.0f;
  return v;
}

TEST(SlidingWindow, OverlappingWindowsAverageToEachVoxelsOwnLogits) {
  const Volume image = ramp({20, 12, 9});
  EchoModel model;
  SlidingWindowOptions o;
  o.window = {8, 8, 8};
  o.overlap = 0.5;
  o.batch = 4;
  const engine::Tensor logits = sliding_window_logits(model, image, o);
  ASSERT_EQ(logits.shape(), (engine::Shape{3, 9, 12, 20}));
  const int64_t v = image.grid.voxel_count();
  for (int64_t i = 0; i < v; ++i) {
    ASSERT_NEAR(logits.data()[i], image.voxels[static_cast<size_t>(i)], 1e-5) << "voxel " << i;
    ASSERT_NEAR(logits.data()[2 * v + i], 1.0f, 1e-6) << "voxel " << i;
  }
  // Windows: x at 0, 4, 8, 12; y at 0, 4; z at 0, 1: 16, in batches of 4.
  EXPECT_EQ(model.calls, 4);
}

TEST(SlidingWindow, AWindowLargerThanTheVolumeOverhangsAndKeepsOnlyTheVolume) {
  const Volume image = ramp({5, 6, 7});
  EchoModel model;
  SlidingWindowOptions o;
  o.window = {8, 8, 8};
  o.fill = 100.0f;
  const engine::Tensor logits = sliding_window_logits(model, image, o);
  ASSERT_EQ(logits.shape(), (engine::Shape{3, 7, 6, 5}));
  for (int64_t i = 0; i < image.grid.voxel_count(); ++i)
    ASSERT_NEAR(logits.data()[i], image.voxels[static_cast<size_t>(i)], 1e-6);
}

// Windows of several volumes share batches: two 8^3 volumes with one window each take one
// forward pass of two, and each gets its own logits back.
TEST(SlidingWindow, WindowsOfSeveralVolumesShareTheBatches) {
  const Volume a = ramp({8, 8, 8}), b = ramp({16, 8, 8});
  EchoModel model;
  SlidingWindowOptions o;
  o.window = {8, 8, 8};
  o.batch = 4;
  const std::vector<engine::Tensor> logits = sliding_window_logits(model, {&a, &b}, o);
  EXPECT_EQ(model.calls, 1);  // 1 + 3 windows
  ASSERT_EQ(logits.size(), 2u);
  EXPECT_EQ(logits[0].shape(), (engine::Shape{3, 8, 8, 8}));
  EXPECT_EQ(logits[1].shape(), (engine::Shape{3, 8, 8, 16}));
  for (int64_t i = 0; i < b.grid.voxel_count(); ++i)
    ASSERT_NEAR(logits[1].data()[i], b.voxels[static_cast<size_t>(i)], 1e-5);
  EchoModel alone;
  EXPECT_EQ(sliding_window_logits(alone, a, o).to_vector(), logits[0].to_vector());
}

TEST(SlidingWindow, AModelThatChangesTheSizeIsRefused) {
  class Shrink : public engine::Model {
   public:
    engine::Tensor forward(const engine::Tensor& x) override {
      return engine::Tensor::zeros({x.size(0), 3, 4, 4, 4});
    }
  } model;
  SlidingWindowOptions o;
  o.window = {8, 8, 8};
  EXPECT_NE(thrown_message<std::invalid_argument>([&] { sliding_window_logits(model, ramp({8, 8, 8}), o); })
                .find("expected (B, C, D, H, W) of the same size"),
            std::string::npos);
}

TEST(Argmax, PicksTheLargestLogitAndTheFirstOnTies) {
  Grid g;
  g.dims = {3, 1, 1};
  const engine::Tensor logits = engine::Tensor::from_vector({2, 1, 1, 3}, {0, 5, 1, /* class 1: */ 2, 5, 0});
  EXPECT_EQ(argmax_labels(logits, g).voxels, (std::vector<uint8_t>{1, 0, 0}));
}

LabelVolume mask(const std::vector<uint8_t>& v) {
  Grid g;
  g.dims = {static_cast<int64_t>(v.size()), 1, 1};
  LabelVolume m(g);
  m.voxels = v;
  return m;
}

TEST(Dice, IsTwiceTheOverlapOverTheSizesPerClass) {
  const LabelVolume truth = mask({0, 1, 1, 1, 2, 2, 0, 0});
  const LabelVolume pred = mask({0, 1, 1, 0, 2, 0, 0, 2});
  const std::vector<double> d = dice_per_class(pred, truth, 3);
  EXPECT_NEAR(d[1], 2.0 * 2 / (2 + 3), 1e-12);
  EXPECT_NEAR(d[2], 2.0 * 1 / (2 + 2), 1e-12);
  EXPECT_NEAR(mean_foreground_dice(pred, truth, 3), (0.8 + 0.5) / 2, 1e-12);
  EXPECT_EQ(mean_foreground_dice(truth, truth, 3), 1.0);
}

TEST(Dice, AClassInNeitherMaskScoresOne) {
  EXPECT_EQ(dice_per_class(mask({0, 1}), mask({0, 1}), 3)[2], 1.0);
  EXPECT_EQ(dice_per_class(mask({0, 0}), mask({0, 1}), 3)[1], 0.0);
}

}  // namespace
}  // namespace quartet::medical3d

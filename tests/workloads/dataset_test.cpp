#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "workloads/dataset.h"

namespace quartet::workloads {
namespace {

// Three 1x2x2 samples; sample i has pixels {i*10, 0, 255, 51}.
ImageDataset tiny() {
  return ImageDataset(1, 2, 2, 10, {0, 0, 255, 51, 10, 0, 255, 51, 20, 0, 255, 51}, {7, 8, 9});
}

float normalized(float v) { return (v / 255.0f - 0.2860f) / 0.3530f; }

TEST(Dataset, FashionMnistNormalizationIsTheStatedMeanAndStd) {
  EXPECT_FLOAT_EQ(kFashionMnistNormalization.mean, 0.2860f);
  EXPECT_FLOAT_EQ(kFashionMnistNormalization.std, 0.3530f);
}

TEST(Dataset, GatherBuildsNchwNormalizedWithFashionMnistStatistics) {
  const Batch b = gather(tiny(), {2});
  EXPECT_EQ(b.x.shape(), (engine::Shape{1, 1, 2, 2}));
  const auto x = b.x.to_vector();
  EXPECT_NEAR(x[0], normalized(20), 1e-5);
  EXPECT_NEAR(x[1], normalized(0), 1e-5);
  EXPECT_NEAR(x[2], normalized(255), 1e-5);
  EXPECT_NEAR(x[3], normalized(51), 1e-5);
}

TEST(Dataset, GatherKeepsTheOrderOfIndicesAndTheirLabels) {
  const Batch b = gather(tiny(), {2, 0, 2});
  EXPECT_EQ(b.y, (std::vector<int32_t>{9, 7, 9}));
  const auto x = b.x.to_vector();
  EXPECT_NEAR(x[0], normalized(20), 1e-5);
  EXPECT_NEAR(x[4], normalized(0), 1e-5);
  EXPECT_NEAR(x[8], normalized(20), 1e-5);
}

TEST(Dataset, GatherRefusesAnIndexOutsideTheDataset) {
  EXPECT_THROW(gather(tiny(), {3}), std::out_of_range);
  EXPECT_THROW(gather(tiny(), {-1}), std::out_of_range);
}

TEST(Dataset, TakeFirstKeepsTheFirstSamples) {
  const ImageDataset d = tiny().take_first(2);
  EXPECT_EQ(d.size(), 2);
  EXPECT_EQ(d.labels(), (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(d.pixels(1)[0], 10);
  EXPECT_THROW(d.pixels(2), std::out_of_range);
}

TEST(Dataset, LabelHistogramCountsTheGivenSamples) {
  EXPECT_EQ(label_histogram(tiny(), {0, 2, 2}), (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 0, 1, 0, 2}));
}

TEST(Dataset, ConstructorRefusesALabelOutsideTheClasses) {
  EXPECT_THROW(ImageDataset(1, 1, 1, 3, {0}, {3}), std::invalid_argument);
}

TEST(Dataset, ConstructorRefusesPixelsThatDoNotMatchTheSamples) {
  EXPECT_THROW(ImageDataset(1, 2, 2, 3, {0, 0, 0}, {1}), std::invalid_argument);
}

}  // namespace
}  // namespace quartet::workloads

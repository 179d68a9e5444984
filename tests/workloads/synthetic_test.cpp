#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "workloads/synthetic.h"

namespace quartet::workloads {
namespace {

std::vector<uint8_t> all_pixels(const ImageDataset& d) {
  return std::vector<uint8_t>(d.pixels(0), d.pixels(0) + d.size() * d.sample_numel());
}

SyntheticOptions small(uint64_t seed) {
  SyntheticOptions o;
  o.train = 300;
  o.test = 100;
  o.seed = seed;
  return o;
}

TEST(Synthetic, SamplesAreOneByTwentyEightByTwentyEightWithTenClasses) {
  const DatasetSplits d = make_synthetic(small(1));
  EXPECT_EQ(d.train.size(), 300);
  EXPECT_EQ(d.test.size(), 100);
  EXPECT_EQ(d.train.sample_shape(), (engine::Shape{1, 28, 28}));
  EXPECT_EQ(d.train.num_classes(), 10);
}

TEST(Synthetic, SameSeedGivesTheSameData) {
  const DatasetSplits a = make_synthetic(small(3)), b = make_synthetic(small(3));
  EXPECT_EQ(all_pixels(a.train), all_pixels(b.train));
  EXPECT_EQ(a.train.labels(), b.train.labels());
  EXPECT_EQ(all_pixels(a.test), all_pixels(b.test));
}

TEST(Synthetic, DifferentSeedsGiveDifferentData) {
  EXPECT_NE(all_pixels(make_synthetic(small(3)).train), all_pixels(make_synthetic(small(4)).train));
}

TEST(Synthetic, TrainAndTestSamplesDiffer) {
  const DatasetSplits d = make_synthetic(small(3));
  EXPECT_FALSE(std::equal(d.test.pixels(0), d.test.pixels(0) + 784, d.train.pixels(0)));
}

TEST(Synthetic, ALargerSetExtendsASmallerOne) {
  SyntheticOptions big = small(5);
  big.train = 600;
  const ImageDataset a = make_synthetic(small(5)).train, b = make_synthetic(big).train.take_first(300);
  EXPECT_EQ(all_pixels(a), all_pixels(b));
  EXPECT_EQ(a.labels(), b.labels());
}

TEST(Synthetic, EveryClassAppears) {
  for (int64_t count : make_synthetic(small(1)).train.label_histogram()) EXPECT_GT(count, 10);
}

TEST(Synthetic, RefusesAnEmptySplit) {
  SyntheticOptions o = small(1);
  o.test = 0;
  EXPECT_THROW(make_synthetic(o), std::invalid_argument);
}

}  // namespace
}  // namespace quartet::workloads

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "workloads/sampler.h"

namespace quartet::workloads {
namespace {

TEST(Sampler, EpochPermutationIsAPermutation) {
  std::vector<int64_t> p = epoch_permutation(1000, 7, 3);
  std::sort(p.begin(), p.end());
  std::vector<int64_t> expected(1000);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(p, expected);
}

TEST(Sampler, EpochPermutationIsDeterministic) {
  EXPECT_EQ(epoch_permutation(500, 7, 3), epoch_permutation(500, 7, 3));
}

TEST(Sampler, EpochPermutationMatchesPinnedValuesOnEveryPlatform) {
  // mt19937_64 and Generator::below are fully specified: these values may never change.
  EXPECT_EQ(epoch_permutation(10, 42, 0), (std::vector<int64_t>{2, 0, 4, 7, 8, 3, 5, 1, 9, 6}));
}

TEST(Sampler, EpochsAndSeedsGiveDifferentOrders) {
  const auto base = epoch_permutation(500, 7, 0);
  EXPECT_NE(base, epoch_permutation(500, 7, 1));
  EXPECT_NE(base, epoch_permutation(500, 8, 0));
}

TEST(Sampler, EmptyAndSingleSamplePermutationsAreTrivial) {
  EXPECT_TRUE(epoch_permutation(0, 1, 0).empty());
  EXPECT_EQ(epoch_permutation(1, 1, 0), (std::vector<int64_t>{0}));
}

TEST(Sampler, ShuffledReordersTheGivenIndicesLikeThePermutation) {
  const std::vector<int64_t> idx{10, 20, 30, 40, 50};
  const auto p = epoch_permutation(5, 9, 2);
  const auto s = shuffled(idx, 9, 2);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(s[i], idx[static_cast<size_t>(p[i])]);
}

TEST(Sampler, MakeBatchesDropsTheLastPartialBatch) {
  std::vector<int64_t> order(10);
  std::iota(order.begin(), order.end(), 0);
  const auto batches = make_batches(order, 4);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(batches[1], (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(batches_per_epoch(10, 4), 2);
  EXPECT_EQ(batches_per_epoch(60000, 128), 468);
}

TEST(Sampler, BatchAtRefusesTheDroppedPartialBatch) {
  const std::vector<int64_t> order(10, 0);
  EXPECT_THROW(batch_at(order, 4, 2), std::out_of_range);
  EXPECT_THROW(batches_per_epoch(10, 0), std::invalid_argument);
}

}  // namespace
}  // namespace quartet::workloads

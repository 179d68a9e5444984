#include "analysis/plan/collectives.h"

#include <gtest/gtest.h>

namespace quartet::analysis::plan {
namespace {

const Link k10GbE{1.25e9, 50e-6};   // 10 Gbit/s
const Link kNvlink{300e9, 3e-6};

TEST(Collectives, RingAllReduceIsTwoNMinusOneStepsOfAnNth) {
  // 4 ranks, 100 MB: 6 steps of 25 MB at 1.25 GB/s = 6 × (0.02 s + 50 µs)
  EXPECT_DOUBLE_EQ(ring_all_reduce_seconds(100e6, 4, k10GbE), 6 * (0.02 + 50e-6));
  EXPECT_EQ(ring_all_reduce_seconds(100e6, 1, k10GbE), 0.0);
}

TEST(Collectives, TreeAllReducePaysLatencyLogarithmically) {
  // 8 ranks: depth 3; 2 × 3 × 50 µs + 2 × 1 MB / 1.25 GB/s
  EXPECT_DOUBLE_EQ(tree_all_reduce_seconds(1e6, 8, k10GbE), 6 * 50e-6 + 2 * 0.8e-3);
  // Small messages: the tree beats the ring; large ones: the ring wins.
  EXPECT_LT(tree_all_reduce_seconds(1e3, 64, k10GbE), ring_all_reduce_seconds(1e3, 64, k10GbE));
  EXPECT_GT(tree_all_reduce_seconds(1e9, 64, k10GbE), ring_all_reduce_seconds(1e9, 64, k10GbE));
}

TEST(Collectives, AllGatherIsHalfARing) {
  EXPECT_DOUBLE_EQ(ring_all_gather_seconds(100e6, 4, k10GbE), 3 * (0.02 + 50e-6));
}

TEST(Collectives, WithinANodeTheIntraLinkCarriesEverything) {
  const CollectiveCost c = all_reduce(Algorithm::ring, 80e6, 8, 1, kNvlink, k10GbE);
  EXPECT_DOUBLE_EQ(c.seconds, 14 * (10e6 / 300e9 + 3e-6));
  EXPECT_DOUBLE_EQ(c.intra_bytes, 2 * 7 * 10e6);
  EXPECT_EQ(c.inter_bytes, 0.0);
}

TEST(Collectives, HierarchicalSendsAnNthOfTheBytesBetweenNodes) {
  // 2 nodes of 8, 80 MB, one NIC of 10 GbE a node: reduce-scatter and all-gather within
  // (7 steps of 10 MB each), then the 8 shards of 10 MB all-reduced between the 2 nodes,
  // 8 rings sharing the NIC (1.25/8 GB/s each): 2 steps of 5 MB.
  const CollectiveCost c = all_reduce(Algorithm::hierarchical, 80e6, 8, 2, kNvlink, k10GbE, 1);
  const double within = 2 * 7 * (10e6 / 300e9 + 3e-6);
  const double between = 2 * (5e6 / (1.25e9 / 8) + 50e-6);
  EXPECT_DOUBLE_EQ(c.seconds, within + between);
  EXPECT_DOUBLE_EQ(c.inter_bytes, 2 * 5e6);
  // Flat, each node's one NIC carries 2 S (n−1)/n, not 2 S (M−1)/M: nearly twice as long.
  EXPECT_GT(all_reduce(Algorithm::ring, 80e6, 8, 2, kNvlink, k10GbE, 1).seconds, 1.8 * c.seconds);
}

TEST(Collectives, FlatRingAcrossNodesUsesTheNicsSideBySide) {
  const Link ib{25e9, 5e-6};  // 200 Gbit/s
  const double one = all_reduce(Algorithm::ring, 1e9, 8, 4, kNvlink, ib, 1).seconds;
  const double eight = all_reduce(Algorithm::ring, 1e9, 8, 4, kNvlink, ib, 8).seconds;
  EXPECT_NEAR(one / eight, 8.0, 0.3);  // latency does not shrink
}

TEST(Collectives, AllToAllSendsAllButItsOwnChunk) {
  const CollectiveCost c = all_to_all(64e6, 4, 2, kNvlink, k10GbE, 1);
  EXPECT_DOUBLE_EQ(c.intra_bytes, 3 * 8e6);
  EXPECT_DOUBLE_EQ(c.inter_bytes, 4 * 8e6);
  // The node's 4 ranks each send 32 MB out on one 10 GbE NIC.
  EXPECT_DOUBLE_EQ(c.seconds, 4 * 50e-6 + 4 * 32e6 / 1.25e9);
}

TEST(CollectivesHostile, UnknownAlgorithmNamesTheKnownOnes) {
  EXPECT_THROW(algorithm_named("butterfly"), std::invalid_argument);
  EXPECT_EQ(algorithm_named("tree"), Algorithm::tree);
}

}  // namespace
}  // namespace quartet::analysis::plan

#include "trainers/mesh/coordinates.h"

#include <gtest/gtest.h>

#include <set>

namespace quartet::trainers::mesh {
namespace {

size_t at(Axis a) { return static_cast<size_t>(a); }

// Megatron's order: rank = tp + TP (cp + CP (ep + EP (dp + DP pp))).
TEST(MeshCoordinates, TpIsInnermostAndPpOutermost) {
  const MeshShape m{.dp = 2, .tp = 2, .pp = 2};
  EXPECT_EQ(coordinates_of(m, 1), (Coordinates{1, 0, 0, 0, 0}));
  EXPECT_EQ(coordinates_of(m, 2), (Coordinates{0, 0, 0, 1, 0}));
  EXPECT_EQ(coordinates_of(m, 4), (Coordinates{0, 0, 0, 0, 1}));
  EXPECT_EQ(coordinates_of(m, 7), (Coordinates{1, 0, 0, 1, 1}));
  const MeshShape all{.dp = 2, .tp = 3, .pp = 2, .cp = 2, .ep = 2};
  const Coordinates c = coordinates_of(all, 3 * (1 + 2 * (1 + 2 * 1)));  // tp 0, cp 1, ep 1, dp 1, pp 0
  EXPECT_EQ(c[at(Axis::tp)], 0);
  EXPECT_EQ(c[at(Axis::cp)], 1);
  EXPECT_EQ(c[at(Axis::ep)], 1);
  EXPECT_EQ(c[at(Axis::dp)], 1);
  EXPECT_EQ(c[at(Axis::pp)], 0);
}

TEST(MeshCoordinates, RankAtInvertsCoordinatesOf) {
  const MeshShape m{.dp = 2, .tp = 2, .pp = 3, .cp = 2, .ep = 2};
  for (int64_t r = 0; r < m.ranks(); ++r) EXPECT_EQ(rank_at(m, coordinates_of(m, r)), r);
}

// Every axis's lines partition the ranks; a member's place in its line is its coordinate
// on the axis, and every member of a line names it alike.
TEST(MeshCoordinates, AxisGroupsPartitionTheRanks) {
  const MeshShape m{.dp = 2, .tp = 2, .pp = 2, .cp = 2, .ep = 1};
  for (Axis a : kAxisOrder) {
    std::set<int> seen;
    std::set<std::string> names;
    for (int64_t r = 0; r < m.ranks(); ++r) {
      const transport::SubGroup g = axis_group(m, r, a);
      ASSERT_EQ(static_cast<int64_t>(g.members.size()), m[a]);
      EXPECT_EQ(transport::place_in(g, static_cast<int>(r)), coordinates_of(m, r)[at(a)]);
      for (int member : g.members) {
        EXPECT_EQ(axis_group(m, member, a).name, g.name);
        Coordinates mine = coordinates_of(m, r), theirs = coordinates_of(m, member);
        mine[at(a)] = theirs[at(a)] = 0;
        EXPECT_EQ(mine, theirs) << "a line differs along its own axis only";
      }
      if (transport::place_in(g, static_cast<int>(r)) == 0) {
        for (int member : g.members) EXPECT_TRUE(seen.insert(member).second) << "rank " << member << " twice";
        names.insert(g.name);
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), m.ranks()) << axis_name(a);
    EXPECT_EQ(static_cast<int64_t>(names.size()), m.ranks() / m[a]) << axis_name(a);
  }
}

TEST(MeshCoordinates, TpLinesAreConsecutiveRanks) {
  const MeshShape m{.dp = 2, .tp = 4};
  EXPECT_EQ(axis_group(m, 5, Axis::tp).members, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(axis_group(m, 5, Axis::dp).members, (std::vector<int>{1, 5}));
  EXPECT_EQ(axis_group(m, 5, Axis::tp).name, "tp/1");
  EXPECT_EQ(axis_group(m, 5, Axis::dp).name, "dp/1");
}

// Megatron's dp-cp group: every rank of one tp (and pp, ep) place, cp innermost.
TEST(MeshCoordinates, AGroupOfTwoAxesHoldsTheirPlane) {
  const MeshShape m{.dp = 2, .tp = 2, .cp = 2};
  const transport::SubGroup g = axes_group(m, 3, {Axis::cp, Axis::dp});
  EXPECT_EQ(g.members, (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(g.name, "cp-dp/1");
  EXPECT_EQ(axes_group(m, 6, {Axis::cp, Axis::dp}).members, (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(axes_group(m, 6, {Axis::cp, Axis::dp}).name, "cp-dp/0");
}

TEST(MeshCoordinates, ShapeNamesItsAxesAboveOne) {
  EXPECT_EQ((MeshShape{.dp = 2, .tp = 4}).str(), "dp 2 x tp 4");
  EXPECT_EQ(MeshShape{}.str(), "1 rank");
}

}  // namespace
}  // namespace quartet::trainers::mesh

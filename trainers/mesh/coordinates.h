#pragma once

// A device mesh of dp x pp x ep x cp x tp ranks and each rank's place on it. Ranks are
// numbered with tp innermost, then cp, ep, dp, and pp outermost (Megatron-LM's default
// order "tp-cp-ep-dp-pp"): the ranks of one tp group are consecutive, so on nodes of
// consecutive ranks tensor parallelism, which talks inside every block, stays inside a
// node, and a pipeline's stages, which talk least, are the ones that cross nodes.
//
//   rank = tp + TP (cp + CP (ep + EP (dp + DP pp)))

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "trainers/settings/table.h"
#include "transport/sub_group.h"

namespace quartet::trainers::mesh {

// Innermost first: the order ranks are numbered in.
enum class Axis : int { tp = 0, cp, ep, dp, pp };
inline constexpr int kAxes = 5;
inline constexpr std::array<Axis, kAxes> kAxisOrder{Axis::tp, Axis::cp, Axis::ep, Axis::dp, Axis::pp};
const char* axis_name(Axis axis);

struct MeshShape {
  int64_t dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;

  int64_t operator[](Axis axis) const;
  int64_t ranks() const { return dp * tp * pp * cp * ep; }
  // "dp 2 x tp 2" (the axes above 1; "1 rank" for none), for messages and labels.
  std::string str() const;

  static const SettingsTable<MeshShape>& table();
};

// A rank's coordinate on each axis, indexed by Axis.
using Coordinates = std::array<int64_t, kAxes>;

// requires 0 <= rank < shape.ranks()
Coordinates coordinates_of(const MeshShape& shape, int64_t rank);
// requires every coordinate within its axis
int64_t rank_at(const MeshShape& shape, const Coordinates& c);

// The line of ranks through `rank` along `axis` (the ranks that differ from it in that
// coordinate only), ordered by that coordinate, so the group's rank of each member is its
// coordinate on the axis. Named "<axis>/<line>": the line's number among the axis's
// lines (its lowest rank with that axis's stride removed), the same on every member.
transport::SubGroup axis_group(const MeshShape& shape, int64_t rank, Axis axis);

// The ranks through `rank` that differ from it on `axes` only (Megatron's dp-cp group:
// axes {cp, dp}), ordered by their coordinates with axes[0] innermost. Named by the axes
// joined with "-" and the line's number, as axis_group() names its lines.
// requires axes distinct and not empty
transport::SubGroup axes_group(const MeshShape& shape, int64_t rank, const std::vector<Axis>& axes);

}  // namespace quartet::trainers::mesh

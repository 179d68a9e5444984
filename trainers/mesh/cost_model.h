#pragma once

// The mesh's cost model for the report's projection: each axis on its own link level, as
// Megatron lays a mesh out on nodes of consecutive ranks. tp and cp talk inside every
// block, so a node holds their lines (the innermost axes): their bytes and messages go on
// the arm's intra_link whatever link is projected. dp, pp and ep cross nodes: theirs go
// on the projected link.

#include <string>
#include <vector>

#include "trainers/cost_model.h"

namespace quartet::trainers::mesh {

// Whether an axis's traffic stays within a node: tp and cp.
inline bool axis_within_node(const std::string& axis) { return axis == "tp" || axis == "cp"; }

// The ranks side by side, each a leg of its steps' compute and its axes' bytes and
// messages on their levels. No stages when a step record lacks comm.axes.
CriticalPath critical_path(const std::vector<RoleRecords>& roles);

}  // namespace quartet::trainers::mesh

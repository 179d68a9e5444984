#pragma once

// mesh: the arm's ranks on a device mesh of dp x tp x pp x cp x ep (trainers/mesh/
// coordinates.h numbers them, tp innermost), each axis with its own process group and
// its own counts in the records. What this build trains on a mesh: dp x tp x pp. Each pp
// line holds the model's stages in pp shares (an even share of the stages each, in order;
// trainers/mesh/pipe_step.h hands activations and gradients between them); each tp line
// holds one share split as tensor_parallel splits it (each rank 1/tp of every block's
// heads and MLP units, Megatron's f and g summing over the line inside forward and
// backward); each dp line holds one slice in dp copies, each training on batch / dp of
// every batch, their gradients averaged over the line by data_parallel's bucketed
// reducer while backward runs. cp runs beside dp (ring attention over each cp line, the
// gradients averaged over the dp x cp plane), and so does ep (expert_parallel's all-to-all
// over each ep line, the shared gradients over the dp x ep plane). docs/mesh.md has the
// rules each axis is checked by. Roles "rank0" .. "rank{N-1}"; rank 0 gathers the whole model to
// evaluate and write it.

#include <cstdint>
#include <optional>
#include <string>

#include "trainers/mesh/coordinates.h"
#include "trainers/regime.h"

namespace quartet::trainers::mesh {

struct Settings : RegimeSettings {
  MeshShape mesh;
  std::optional<int64_t> ranks;  // when given, the mesh's product must equal it
  std::string backend = "shm";   // shm, gloo (CPU); nccl (GPU)
  bool sequence_parallel = false;  // on the tp axis, as tensor_parallel's
  int64_t zero = 0;              // ZeRO over dp: 1 optimizer state, 2 also gradients
  int64_t micro_batches = 1;     // per dp replica and step
  double bucket_mb = 25.0;       // dp's gradient buckets
  std::string intra_link = "nvlink";  // the projection's link for tp and cp (within a node)

  int64_t world() const { return mesh.ranks(); }
  static const SettingsTable<Settings>& table();
};

const Regime& regime();

}  // namespace quartet::trainers::mesh

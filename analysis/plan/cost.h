#pragma once

// The planner's cost of one step of an arm on a cluster (docs/plan.md). Every regime
// that trains one model on ranks (single, accumulate, data_parallel, tensor_parallel,
// pipeline, context_parallel, and any dp × tp × pp × cp mesh of them) is one formula:
//
//   micro-batch   b = batch / (dp m) samples; a stage's layers split tp ways (Megatron's
//                 column/row pairs), positions cp ways
//   slot          the slowest pipeline stage's forward + backward of one micro-batch
//                 (+ a recomputed forward with checkpointing), each layer a roofline:
//                 max(FLOPs / (peak × efficiency of its op class), bytes / (memory
//                 bandwidth × elementwise efficiency)), backward twice the forward; plus
//                 the stage's tensor-parallel all-reduces (2 forward, 2 backward a block:
//                 exposed), context parallelism's K/V ring beyond the attention it hides
//                 behind, and the activation sends between stages
//   step          (m + P − 1) slots (GPipe and 1F1B alike: their bubble is the same
//                 P − 1 slots) + the gradient reduction over dp × cp that backward did
//                 not hide (DDP's buckets overlap the last micro-batch's backward when
//                 P = 1; after the flush when P > 1) + ZeRO-3's gathers not hidden + the
//                 optimizer step (elementwise over the local state)
//
// Placement: ranks fill nodes in mesh order, tp innermost; an axis's group spans
// `per_node` ranks on each of `nodes` nodes, and its collectives price the intra and
// inter links accordingly (analysis/plan/collectives.h).

#include <string>
#include <vector>

#include "analysis/plan/arm.h"
#include "analysis/plan/cluster.h"
#include "analysis/plan/memory.h"
#include "analysis/plan/model_shape.h"

namespace quartet::analysis::plan {

struct Prediction {
  std::string arm;
  std::string regime;
  std::string mesh;                  // Mesh::text()
  int64_t ranks = 1;
  double step_seconds = 0.0;
  double samples_per_second = 0.0;
  double compute_seconds = 0.0;      // the step's compute on the critical path
  double comm_seconds = 0.0;         // communication not hidden behind compute
  double bubble_seconds = 0.0;       // pipeline slots idle
  MemoryBytes memory;                // per device, the fullest one
  double memory_capacity = 0.0;      // per rank: its devices' memory
  bool fits = true;
  double intra_bytes = 0.0;          // a device sends within its node, per step
  double inter_bytes = 0.0;          // a device sends between nodes, per step
  double mfu = 0.0;                  // model FLOPs (no recomputation) / peak of the ranks' devices
  std::string bottleneck;            // in words
  std::string unsupported;           // non-empty: why nothing is predicted (then the rest is 0)
};

// An arm's mesh, micro-batches and knobs as the formula above reads them (`quartet plan`
// reads a spec's arm into one by its regime's fields). std::invalid_argument
// for an arm the model or cluster cannot take (a batch that does not split, more
// ranks than devices, a cut that is no stage), naming what is wrong.
// split and federated arms go to analysis/plan/rounds.h's predictions.
Prediction predict(const ModelShape& model, const PlanArm& arm, const ClusterProfile& cluster);

// Forward and backward seconds of layers [first, last) for `samples` on `devices` of the
// cluster's devices, while `busy` of a cpu node's cores compute at once (0: just these):
// the roofline of predict's slot, for the regimes whose ranks are not a mesh (split's
// client and server halves, federated pools).
double layers_seconds(const ModelShape& model, size_t first, size_t last, double samples, const ClusterProfile& cluster,
                      const std::string& precision, double devices, double busy = 0);

// The first layer of each of `stages` contiguous pipeline stages, by `cuts` (the last
// model stage before each cut) or, when empty, balanced by forward FLOPs and bytes.
std::vector<size_t> pipeline_stage_starts(const ModelShape& model, int64_t stages, const std::vector<std::string>& cuts);

}  // namespace quartet::analysis::plan

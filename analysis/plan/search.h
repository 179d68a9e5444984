#pragma once

// The planner's search: every mesh whose axes multiply to a divisor of the devices and
// split the model (tp divides the heads, 2 cp the context, pp at most its stages, dp the
// batch), with every ZeRO stage (when dp × cp > 1), micro-batch count (powers of two that
// divide a rank's batch) and checkpointing on and off; predicted, ranked by step time
// among the settings that fit in memory.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "analysis/plan/arm.h"
#include "analysis/plan/cluster.h"
#include "analysis/plan/cost.h"
#include "analysis/plan/model_shape.h"

namespace quartet::analysis::plan {

// Every assignment of sizes to `axes` (kMeshAxes names; the others stay 1) whose
// product divides `devices`, in a fixed order.
std::vector<Mesh> enumerate_meshes(int64_t devices, const std::vector<std::string>& axes);

struct SearchOptions {
  std::vector<std::string> axes = {"dp", "tp", "pp", "cp"};  // ep joins when the model has experts
  bool zero = true;
  bool checkpointing = true;
  int64_t max_micro_batches = 64;
};

struct Candidate {
  PlanArm arm;
  Prediction prediction;
};

struct SearchResult {
  std::vector<Candidate> ranked;  // fitting ones, fastest first
  int64_t tried = 0;              // settings predicted
  int64_t refused = 0;            // meshes the model cannot take
  int64_t too_big = 0;            // predicted, but not fitting
};

// `base` gives the batch, precision and optimizer; its regime and mesh are replaced.
SearchResult search(const ModelShape& model, const PlanArm& base, const ClusterProfile& cluster,
                    const SearchOptions& options = {});

// The regime an existing spec arm would need for `arm`'s mesh: single, accumulate,
// data_parallel, tensor_parallel, pipeline, context_parallel or expert_parallel; "" when more than one
// axis is > 1 (a mesh no single regime runs).
std::string regime_for(const PlanArm& arm);

}  // namespace quartet::analysis::plan

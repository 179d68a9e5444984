#pragma once

// Tensor parallelism's part in the training loop, over one group of ranks (the whole arm
// under tensor_parallel, one tp line of a mesh): each rank holds its slice of every
// block's heads and MLP units (workloads::tensor_parallel_plan), Megatron's f and g sum
// over the group inside forward and backward (counted here), and the group's slices are
// gathered into the whole model on the arm's rank 0 where the loop evaluates and saves.

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/model.h"
#include "trainers/data_parallel/rank_group.h"
#include "trainers/training_loop.h"
#include "workloads/models.h"

namespace quartet::trainers::tensor_parallel {

// Where rank `rank` of `size` finds its part of a whole parameter of `shape` (rows:
// a slice of dim 0; columns: of dim 1, in every row) as (offset, count) runs of the
// whole's values, in the slice's order. None for a part the rank does not hold.
std::vector<std::pair<int64_t, int64_t>> slice_runs(const engine::Shape& shape, workloads::TensorSplit split,
                                                    int rank, int size);

// A parameter of the whole model and how the group holds it.
struct Part {
  std::string name;
  workloads::TensorSplit split;
  engine::Shape whole_shape;
  engine::Tensor slice;  // this rank's; undefined where it holds none
};

class SliceHook final : public Reducer {
 public:
  // comm: the tp group (its rank is this rank's slice); sequence_parallel as the
  // regime's setting. ctx.rank 0 builds the whole model in gather_model().
  SliceHook(const RoleContext& ctx, transport::Collectives& comm, bool sequence_parallel);

  workloads::TensorParallelGroup group() { return {comm_.rank(), comm_.size(), &sum_, sequence_parallel_}; }
  // Sequence parallel: this rank's contiguous slice of every sequence.
  std::vector<int64_t> positions() const;
  // Loads this rank's slices of the whole model's initial weights into `shard`.
  void load(engine::Model& shard);
  // After load(): this rank holds only the parts `held` names (a pipeline stage's), the
  // others' storage freed; gather_model() then also sums each part over `across` (the
  // pipeline's group, whose ranks hold the other parts). requires across.size() > 1
  void hold_only(const std::function<bool(const std::string& name)>& held, transport::Collectives& across);
  // Before the first step: the group's ranks resumed at the same step.
  void start(const Position& pos);

  void begin_step() override;
  double inline_seconds() const override { return sum_.seconds; }
  double finish() override;
  double step(engine::Optimizer& optimizer, double clip_grad_norm) override;
  void gather_model() override;
  void release_model() override;
  engine::Model& whole() { return *whole_; }

  // What its sums moved since it was made, and in the step so far.
  const CommCounters& counters() const { return counters_; }
  CommCounters step_counters() const { return counters_.since(before_); }

 private:
  const RoleContext& ctx_;
  transport::Collectives& comm_;
  bool sequence_parallel_;
  CommCounters counters_, before_, gather_counters_;
  data_parallel::CountedSum sum_, gather_sum_;
  std::vector<Part> parts_;
  transport::Collectives* across_ = nullptr;
  std::shared_ptr<engine::Model> whole_;  // rank 0, between gather_model and release_model
};

}  // namespace quartet::trainers::tensor_parallel

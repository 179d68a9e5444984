#pragma once

// ZeRO stage 3, as PyTorch's FSDP does it with one unit per model stage: each rank keeps
// only its shard of every parameter (GradReducer's layout, whose buckets never cross a
// stage); a stage's parameters are gathered from every rank just before its forward and
// freed after it, gathered again when backward reaches the stage, and freed once its
// gradients are final (they go to the reduce-scatter). While a stage computes, the next
// one's gather is in flight: the stage after it in forward, the one before it in backward
// (FSDP's forward and backward prefetch). The model's last stage is kept from its forward
// to its backward, which follows at once (FSDP leaves its root unsharded the same way).
//
// So a rank holds, of the parameters, its shard plus at most the stages in use and the
// one being prefetched: the peak is about P/N + the largest two neighbouring stages.

#include <vector>

#include "engine/model.h"
#include "trainers/data_parallel/reducer.h"

namespace quartet::trainers {

// Per parameter of model.parameters(), the index of the stage that holds it.
std::vector<int> stage_of_parameters(engine::Model& model);

class ShardedModel final : public engine::StageHooks {
 public:
  // grads: built with group_of = stage_of_parameters(model), zero 3. shard: this rank's
  // parameter shard (what the optimizer steps), read at each gather. Installs itself as
  // the model's stage hooks; the parameters stay as they are until release_all().
  ShardedModel(engine::Model& model, GradReducer& grads, const engine::Tensor& shard);
  ~ShardedModel() override;
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  void before_forward(int stage) override;
  void after_forward(int stage) override;
  void before_backward(int stage) override;

  // Before each backward pass: every stage's parameters count as pending again.
  void begin_backward();
  // Every stage gathered and kept so until release_all() (the whole model read).
  void gather_all();
  // Every stage freed; hooks gather on demand again.
  void release_all();

  // Seconds spent waiting for gathers so far.
  double wait_seconds() const { return waited_; }

 private:
  struct Stage {
    std::vector<int> buckets;
    int params = 0;
    int pending = 0;  // parameters whose gradient is not final yet in this backward
    bool resident = false;
    bool gathering = false;
  };
  void prefetch(int stage);
  void ensure(int stage);
  void release(int stage);
  void on_grad_ready(int stage);

  engine::Model& model_;
  GradReducer& grads_;
  const engine::Tensor& shard_;
  std::vector<engine::Tensor> params_;
  std::vector<Stage> stages_;
  bool whole_ = false;
  double waited_ = 0.0;
};

}  // namespace quartet::trainers

#pragma once

#include <memory>
#include <optional>

#include "engine/model.h"
#include "trainers/checkpoint.h"
#include "trainers/metrics.h"
#include "trainers/regime.h"

namespace quartet::trainers {

// One process trains the whole model: each optimizer step takes `batch` samples of the
// epoch's permutation in `micro_batches` slices, each slice's loss scaled by
// 1/micro_batches, so the summed gradient equals the gradient of the whole batch's mean
// loss. Evaluates and checkpoints at the end of every epoch; writes final weights.
void train_locally(const RoleContext& ctx, int64_t micro_batches);

// Pieces every loop over the global batch shares (single, accumulate, data_parallel).

struct LoopPlan {
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;  // over every epoch, capped by max_steps
};
// Throws std::invalid_argument when the batch does not fit the training set.
LoopPlan plan_loop(const TrainConfig& cfg, int64_t train_size);

// The arm's model with the run's initial weights, activation checkpointing as the arm says.
std::shared_ptr<engine::Model> load_initial_model(const RoleContext& ctx);

// Ends a step: takes this step's training memory, evaluates `model` when `evaluate`
// (then resets the memory peaks, so evaluation's larger batches never count as training
// memory), sets r.wall = wall0 + clock (evaluation included), writes the record with
// `extra` merged in and hands it to ctx.on_record.
void finish_step(const RoleContext& ctx, JsonlWriter& records, StepRecord& r, double wall0,
                 const Stopwatch& clock, bool evaluate, engine::Model& model,
                 const nlohmann::json& extra = nlohmann::json::object());

}  // namespace quartet::trainers

#pragma once

// The one training loop. Every regime's local steps go through train_step(): micro-batches
// with their losses scaled so the summed gradient is the whole step's, the reducer's hooks
// around backward, then the optimizer step. train_loop() runs epochs of such steps for the
// regimes that train the global model (single, accumulate, data_parallel): sample order,
// learning-rate schedule, records, evaluation, checkpoints and resume live there once.
// What differs between regimes is the Reducer: none for single and accumulate, the
// bucketed all-reduce for data_parallel, shard and gather for ZeRO. Federated clients call
// train_step() for their local epochs, split clients with their own micro-step (forward to
// the cut, backward from the gradients that come back).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <vector>

#include "engine/model.h"
#include "engine/optim.h"
#include "trainers/checkpoint.h"
#include "trainers/metrics.h"
#include "trainers/regime.h"

namespace quartet::trainers {

// What a step's compute took, in seconds, and its mean loss.
struct StepTimes {
  double data = 0.0, forward = 0.0, backward = 0.0, optimizer = 0.0;
  double comm_exposed = 0.0;  // communication that compute did not hide
  double loss = 0.0;          // mean over the micro-batches
};

// The hook through which a regime takes part in every step (in the spirit of
// Flashlight's Reducer: told as gradients become ready, finishing at the step). The base
// class is the no-op of one process.
class Reducer {
 public:
  virtual ~Reducer() = default;
  // Before the step's first micro-batch; the parameters' grads have been dropped.
  virtual void begin_step() {}
  // Before each micro-batch's backward: whether it completes the step's gradients.
  virtual void prepare(bool last_micro_batch) { (void)last_micro_batch; }
  // Seconds of communication spent inside forward and backward so far (SyncBatchNorm's
  // statistics), not counted as their compute.
  virtual double inline_seconds() const { return 0.0; }
  // After the last micro-batch's backward: finishes the step's gradients; returns the
  // seconds spent waiting for communication.
  virtual double finish() { return 0.0; }
  // Clips the gradients to `clip_grad_norm` (0: no clipping) and steps; returns the
  // seconds of communication inside (a sharded norm, gathering updated shards).
  virtual double step(engine::Optimizer& optimizer, double clip_grad_norm);
  // Around the points where the loop reads the whole model (evaluation, checkpoints, the
  // final weights), on every process alike: ZeRO-3 gathers every parameter there, and
  // frees them again once the loop trains on.
  virtual void gather_model() {}
  virtual void release_model() {}
};

// One micro-batch's forward and backward: the loss of `batch`, its gradient scaled by
// `scale` accumulated into the parameters' grads; adds its compute to t.forward and
// t.backward and returns the loss.
class MicroStep {
 public:
  virtual ~MicroStep() = default;
  virtual double run(const workloads::Batch& batch, float scale, StepTimes& t) = 0;
};

// The part of a batch one process computes (context_parallel: its positions of every
// sequence); none: the whole batch.
using LocalBatch = std::function<workloads::Batch(const workloads::Batch&)>;
// The given positions of every sequence of a batch of sequences: x (N, T) -> (N, L), and
// the labels of those positions, sample by sample.
workloads::Batch sequence_positions(const workloads::Batch& batch, const std::vector<int64_t>& positions);

// The whole model and the workload's loss, on one process.
class WholeModelStep final : public MicroStep {
 public:
  WholeModelStep(engine::Model& model, const workloads::Workload& workload, const Reducer& reducer,
                 LocalBatch local = nullptr)
      : model_(model), device_(model.device()), workload_(workload), reducer_(reducer), local_(std::move(local)) {}
  double run(const workloads::Batch& batch, float scale, StepTimes& t) override;

 private:
  engine::Model& model_;
  engine::Device device_;  // the batch goes where the model is
  const workloads::Workload& workload_;
  const Reducer& reducer_;
  LocalBatch local_;
};

struct StepOptions {
  int64_t micro_batches = 1;
  std::optional<float> lr;       // set on the optimizer before it steps; none: keep its rate
  double clip_grad_norm = 0.0;   // 0: off
  // After the gradients are final and before clipping (FedProx's proximal term).
  std::function<void()> before_step;
};

// One optimizer step of `params` on `samples` (this process's samples of the step, taken in
// micro_batches equal slices): drops the grads, runs each slice through `micro` with its
// loss scaled by 1/micro_batches and the reducer's hooks around it, then clips and steps
// through the reducer.
// requires samples.size() divisible by options.micro_batches
StepTimes train_step(const workloads::Workload& wl, std::span<const int64_t> samples, int64_t epoch,
                     const std::vector<engine::Tensor>& params, engine::Optimizer& optimizer, Reducer& reducer,
                     MicroStep& micro, const StepOptions& options);

struct LoopPlan {
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;  // over every epoch, capped by max_steps
};
// Throws std::invalid_argument when the batch does not fit the training set.
LoopPlan plan_loop(const TrainConfig& cfg, int64_t train_size);

// How a regime runs the loop over the global batch.
struct LoopOptions {
  int64_t micro_batches = 1;   // per process and step
  int rank = 0, ranks = 1;     // this process takes slice `rank` of `ranks` of every global batch
  bool lead = true;            // evaluates and writes the final weights
  bool checkpoints = true;     // saves a checkpoint at the end of every epoch
  std::filesystem::path checkpoint;    // where (and where a resume reads from)
  nlohmann::json checkpoint_extra = nlohmann::json::object();
  // Called once the position is known (a resume's, or the start): collective set-up
  // that must follow loading a checkpoint (data_parallel: every rank at the same step,
  // rank 0's state everywhere).
  std::function<void(const Position&)> on_start;
  // Fields a step's record adds (data_parallel: its communication), after the step.
  std::function<nlohmann::json(StepRecord& record, const Position& position)> record_step;
  // The model the lead evaluates and writes as the final weights, asked for after
  // Reducer::gather_model(); none: the model it trains (tensor_parallel trains a slice and
  // gathers the whole model from its ranks' slices).
  std::function<engine::Model&()> whole_model;
  // What of each micro-batch this process computes (WholeModelStep); none: all of it.
  LocalBatch local_batch;
  // How a micro-batch runs on this process (a mesh's pipeline stage: its stages, with its
  // neighbours' activations and gradients); none: WholeModelStep over `model`.
  MicroStep* micro_step = nullptr;
};

// Trains ctx's model for the arm's epochs (capped by max_steps): each step takes the
// rank's slice of `batch` samples of the epoch's permutation through train_step(), writes
// a record (evaluated when lead at each epoch's end and where evaluation_due()) and
// checkpoints at each epoch's end;
// a resumed role continues from its checkpoint, its records cut back to that step. The
// lead writes the final weights.
void train_loop(const RoleContext& ctx, engine::Model& model, engine::Optimizer& optimizer, Reducer& reducer,
                const LoopOptions& options);

// One process, nothing to reduce (single, accumulate): train_loop() over the whole batch
// in `micro_batches` slices, checkpoints in the arm's checkpoint file.
void train_locally(const RoleContext& ctx, int64_t micro_batches);

// The arm's model on the role's device, as its seed initialises it (weights are usually
// loaded next), activation checkpointing as the arm says.
std::shared_ptr<engine::Model> make_model(const RoleContext& ctx);
// make_model() with the run's initial weights.
std::shared_ptr<engine::Model> load_initial_model(const RoleContext& ctx);

// Ends a step: takes this step's training memory (or `train_memory`, when the caller took
// it before making ready to evaluate), evaluates `model` when `evaluate` (then resets the
// memory peaks, so evaluation's larger batches never count as training memory), sets
// r.wall = wall0 + clock (evaluation included), writes the record with `extra` merged in
// and hands it to ctx.on_record.
void finish_step(const RoleContext& ctx, JsonlWriter& records, StepRecord& r, double wall0,
                 const Stopwatch& clock, bool evaluate, engine::Model& model,
                 const nlohmann::json& extra = nlohmann::json::object(),
                 const std::optional<engine::MemStats>& train_memory = std::nullopt);

// Size of a record file's lines up to the record of `step` (a resume keeps those).
int64_t records_bytes_through(const std::filesystem::path& path, int64_t step);

}  // namespace quartet::trainers

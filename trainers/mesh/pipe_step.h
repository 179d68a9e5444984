#pragma once

// A mesh's pipeline axis: rank s of a pp line runs stages [first, last) of the model on
// every micro-batch, takes its inputs from stage s - 1 and hands its outputs to stage
// s + 1, and the gradients of those the other way. Neighbours talk in a group of their
// own (the line's link s: stages s and s + 1), each hand-over one broadcast from the
// sender (a shape header, then each tensor). Micro-batches go through the stages one at
// a time, forward then backward (no schedule overlaps them: the pipeline regime's GPipe
// and 1F1B do); the last stage's loss reaches every stage by a sum over the line.

#include <memory>
#include <vector>

#include "engine/model.h"
#include "trainers/data_parallel/reducer.h"
#include "trainers/training_loop.h"
#include "transport/collectives.h"

namespace quartet::trainers::mesh {

class PipeStep final : public MicroStep {
 public:
  // stages: this rank's stages as a model; line: the pp group (its rank is this stage);
  // to_prev, to_next: the links to the neighbours (null at the ends). Each must outlive it.
  // local: what of each micro-batch this stage computes (sequence parallel: its tp
  // slice of every sequence); none: all of it.
  PipeStep(engine::Model& stages, const workloads::Workload& workload, const Reducer& reducer,
           transport::Collectives& line, transport::Collectives* to_prev, transport::Collectives* to_next,
           LocalBatch local = nullptr);

  double run(const workloads::Batch& batch, float scale, StepTimes& t) override;

  // What this stage sent: its activations and gradients (each counted once, by the sender)
  // and the loss sums. Every hand-over blocks: the seconds spent receiving (and summing the
  // loss) and sending are all exposed.
  CommCounters counters;
  double wait_seconds = 0.0, send_seconds = 0.0;
  double seconds() const { return wait_seconds + send_seconds; }

 private:
  engine::TensorList receive(const engine::TensorList* like);
  void send(transport::Collectives& link, const engine::TensorList& tensors, bool header);

  engine::Model& stages_;
  engine::Device device_;
  const workloads::Workload& workload_;
  const Reducer& reducer_;
  transport::Collectives& line_;
  transport::Collectives* to_prev_;
  transport::Collectives* to_next_;
  LocalBatch local_;
};

}  // namespace quartet::trainers::mesh

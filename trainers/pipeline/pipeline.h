#pragma once

// The pipeline regime (docs/pipeline.md): the model is cut at stage names into P stage
// processes, "stage0".."stage<P-1>"; every step's batch runs through them as m
// micro-batches, activations forward and their gradients back between neighbours, one
// optimizer step per stage per step. Schedules: GPipe (all forwards, then all backwards)
// and 1F1B (PipeDream-flush: warm-up forwards, one forward one backward, cool-down
// backwards). Stage 0 reads the inputs; the last stage computes the loss, reading the
// labels of the same samples from the same seeded order (no label crosses the network).

#include <cstdint>
#include <string>
#include <vector>

#include "trainers/regime.h"

namespace quartet::trainers::pipeline {

struct Settings : RegimeSettings {
  std::vector<std::string> cuts;     // each names the last stage before a cut; P = cuts + 1
  int64_t micro_batches = 1;         // per step; the batch must split evenly
  std::string schedule = "1f1b";     // gpipe, 1f1b
  double step_timeout_s = 600.0;     // a neighbour silent this long fails the arm
  double join_timeout_s = 300.0;     // stages wait this long for their neighbours (not a spec field)

  static const SettingsTable<Settings>& table();
  int64_t stages() const { return static_cast<int64_t>(cuts.size()) + 1; }
};

const Regime& regime();

std::vector<std::string> schedule_names();

// One operation of a stage's schedule: the forward or the backward of a micro-batch.
struct Op {
  bool forward = true;
  int64_t micro = 0;
  bool operator==(const Op&) const = default;
};

// The order in which stage `stage` of `stages` runs the forwards and backwards of
// `micro_batches` micro-batches in one step. Backwards go in micro-batch order under both
// schedules, so each stage sums its gradients in the order accumulate does.
//   gpipe: F0 .. F(m-1), B0 .. B(m-1)
//   1f1b:  min(P-1-stage, m) warm-up forwards, then one forward and one backward until the
//          forwards are done, then the remaining backwards
// requires 0 <= stage < stages, micro_batches >= 1, schedule one of schedule_names()
std::vector<Op> stage_schedule(const std::string& schedule, int64_t stage, int64_t stages, int64_t micro_batches);
// The most micro-batches whose forward has run and backward has not, at any point of `ops`:
// what a stage holds activations for. 1f1b: P - stage; gpipe: m.
int64_t most_in_flight(const std::vector<Op>& ops);
// "F0 F1 B0 ...", for messages and docs.
std::string to_string(const std::vector<Op>& ops);

// The pipeline bubble of an ideal pipeline of equal stages: (P-1) / (m+P-1) of each
// stage's step time is idle.
double bubble_fraction(int64_t stages, int64_t micro_batches);

// The stage ranges: stage s runs model stages [first[s], first[s+1]); first has P+1
// entries, first[0] = 0 and first[P] = the model's stage count.
// requires settings the regime completed (cut names known and in order)
std::vector<int> stage_bounds(const std::vector<std::string>& model_stages, const Settings& settings);

// The coordinator keys where stage s publishes the address and token its upstream
// neighbour (stage s-1) connects to.
std::string stage_address_key(const std::string& arm, int64_t stage);
std::string stage_token_key(const std::string& arm, int64_t stage);

// The cost model: each step, the stages side by side, each taking m+P-1 slots of its own
// per-micro-batch compute and sends.
CriticalPath critical_path(const std::vector<RoleRecords>& roles);

// requires ctx.coordinator (rendezvous), ctx.workload; ctx.rank is the stage
void run_stage(const RoleContext& ctx, const Settings& settings);

}  // namespace quartet::trainers::pipeline

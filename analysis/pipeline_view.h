#pragma once

// What the report shows of a pipeline arm (docs/pipeline.md): per stage, its busy and idle
// seconds a step, its idle fraction beside the bubble formula (P-1)/(m+P-1), its peaks of
// activation memory and micro-batches in flight; and a timeline of one step, every
// stage's forwards, backwards and optimizer step on one clock, as an SVG drawn without Qt.

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/results_model.h"
#include "analysis/tables.h"

namespace quartet::analysis {

// One stage's figures, means over its step records but the first (the pipeline fills
// and the caches warm during it), or over the only one.
struct StageFigures {
  int64_t stage = 0;
  std::string role;         // stage0, …
  std::string first, last;  // its first and last model stages
  std::string schedule;     // gpipe, 1f1b
  int64_t micro_batches = 0;
  double busy = 0.0;        // s a step: compute (batch assembly, forward, backward, optimizer)
  double idle = 0.0;        // s a step: the rest of the step's wall time
  double idle_fraction = 0.0;  // sum of idle / sum of step wall
  double bubble_formula = 0.0;  // (P-1)/(m+P-1)
  double replayed_idle_fraction = -1.0;  // replay_step's, over the same steps; < 0 without timelines
  int64_t in_flight_peak = 0;
  double activations_peak = 0.0;  // bytes, the largest over the steps
  int64_t steps = 0;              // step records averaged
};

// The arm's stages in order; empty for an arm with no pipeline records.
std::vector<StageFigures> pipeline_stages(const ArmResults& arm);

// The busiest stage's busy seconds a step over the least busy one's: 1 for balanced
// stages. 0 without stages.
double stage_balance(const std::vector<StageFigures>& stages);

// One row per stage.
Table pipeline_table(const std::vector<StageFigures>& stages);
std::string pipeline_table_note();

// One operation of a stage's step on the arm's clock.
struct TimelineOp {
  std::string op;  // F (forward), B (backward), S (optimizer step)
  int64_t micro = -1;
  double start = 0.0, end = 0.0;  // s from the earliest stage's start of the step
};

struct StageTimeline {
  int64_t stage = 0;
  std::string role;
  std::vector<TimelineOp> ops;
  double step_end = 0.0;  // s, when this stage's step ended (its record's step_wall)
};

// Every stage's operations in step `step` (the last step recorded by every stage when
// step < 0), lined up on the stages' shared clock (their records' timeline_start);
// empty when the records carry no timeline.
std::vector<StageTimeline> pipeline_timeline(const ArmResults& arm, int64_t step = -1);

// A step replayed from its stages' own operation times with free, instant transfers:
// each operation starts as soon as its stage is free and its input exists (a forward once
// the stage before has run that micro-batch's forward, a backward once the stage after has
// run its backward), and the step ends with the last operation. What the stages' imbalance
// alone makes them idle; the measured idle above it is transfers and waiting for a
// neighbour the machine did not run. Empty when the lanes are not stages 0 … P-1 or their
// operations cannot be ordered.
struct Replay {
  double step = 0.0;         // s
  std::vector<double> idle;  // s, per lane
};
Replay replay_step(const std::vector<StageTimeline>& lanes);

// The timeline as an SVG image: a lane per stage, a box per operation (forwards blue,
// backwards orange, optimizer grey) labelled with its micro-batch; the gaps are idle.
std::string timeline_svg(const std::vector<StageTimeline>& timeline, const std::string& title);

// "pipeline-<arm>.svg", the file the report writes the arm's timeline to.
std::string timeline_file(const ArmResults& arm);

}  // namespace quartet::analysis

// The pipeline schedules as pure functions of the stage, the stage count and the
// micro-batches: what each stage process runs, and what the tests check against the
// textbook orders (GPipe, Huang et al. 2019; 1F1B, PipeDream-flush, Narayanan et al. 2021).

#include <algorithm>
#include <stdexcept>

#include "trainers/pipeline/pipeline.h"

namespace quartet::trainers::pipeline {

std::vector<std::string> schedule_names() { return {"gpipe", "1f1b"}; }

std::vector<Op> stage_schedule(const std::string& schedule, int64_t stage, int64_t stages, int64_t micro_batches) {
  if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1)
    throw std::invalid_argument("pipeline: no schedule for stage " + std::to_string(stage) + " of " +
                                std::to_string(stages) + " with " + std::to_string(micro_batches) + " micro-batches");
  std::vector<Op> ops;
  if (schedule == "gpipe") {
    for (int64_t i = 0; i < micro_batches; ++i) ops.push_back({true, i});
    for (int64_t i = 0; i < micro_batches; ++i) ops.push_back({false, i});
    return ops;
  }
  if (schedule != "1f1b") throw std::invalid_argument("pipeline: unknown schedule \"" + schedule + "\"");
  // Warm-up: enough forwards that the last stage's first backward can come back.
  const int64_t warmup = std::min(stages - 1 - stage, micro_batches);
  int64_t f = 0, b = 0;
  while (f < warmup) ops.push_back({true, f++});
  while (f < micro_batches) {
    ops.push_back({true, f++});
    ops.push_back({false, b++});
  }
  while (b < micro_batches) ops.push_back({false, b++});
  return ops;
}

int64_t most_in_flight(const std::vector<Op>& ops) {
  int64_t now = 0, most = 0;
  for (const Op& op : ops) {
    now += op.forward ? 1 : -1;
    most = std::max(most, now);
  }
  return most;
}

std::string to_string(const std::vector<Op>& ops) {
  std::string s;
  for (const Op& op : ops) {
    if (!s.empty()) s.push_back(' ');
    s.push_back(op.forward ? 'F' : 'B');
    s.append(std::to_string(op.micro));
  }
  return s;
}

double bubble_fraction(int64_t stages, int64_t micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace quartet::trainers::pipeline

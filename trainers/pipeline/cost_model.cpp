#include <algorithm>
#include <map>

#include "trainers/pipeline/pipeline.h"

namespace quartet::trainers::pipeline {

// Reads the "pipeline" object stage.cpp writes into each step record. A flushed
// pipeline of equal stages takes m+P-1 slots a step, a slot being one micro-batch's
// compute and sends on a stage; so each stage's leg is its step's compute and sent
// messages times (m+P-1)/m, and the slowest stage decides. Steps are matched by number.
CriticalPath critical_path(const std::vector<RoleRecords>& roles) {
  std::map<int64_t, PathStage> steps;
  for (const RoleRecords& role : roles)
    for (const nlohmann::json& line : role.records) {
      const RecordView r = read_record(line);
      const nlohmann::json& p = member(line, "pipeline");
      if (!r.is_step() || !p.is_object()) continue;
      const double m = number(p, "micro_batches", 1.0), P = number(p, "stages", 1.0);
      const double slots = (m + P - 1.0) / std::max(1.0, m);
      PathLeg leg;
      leg.compute = number(p, "busy", r.compute_seconds()) * slots;
      leg.bytes = number(p, "step_bytes_sent") * slots;
      leg.messages = number(p, "step_messages") / 2.0 * slots;  // sent and received: half are this stage's
      steps[r.step].parallel.push_back(leg);
    }
  if (steps.empty()) return {};
  CriticalPath path{{}, "stages side by side, each step m+P−1 slots of each stage's per-micro-batch compute and sends"};
  for (auto& [step, stage] : steps) path.stages.push_back(std::move(stage));
  return path;
}

}  // namespace quartet::trainers::pipeline

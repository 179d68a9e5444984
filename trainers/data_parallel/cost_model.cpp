#include "trainers/data_parallel/data_parallel.h"

namespace quartet::trainers::data_parallel {

// Each rank's ring messages are its own bytes and message counts (the algorithm's:
// 2(N−1) messages of S/N per all-reduce of S bytes), cumulative in its step records.
CriticalPath critical_path(const std::vector<RoleRecords>& roles) {
  PathStage stage;
  for (const RoleRecords& role : roles) {
    PathLeg leg;
    bool any = false;
    for (const nlohmann::json& line : role.records) {
      const RecordView r = read_record(line);
      if (!r.is_step()) continue;
      any = true;
      leg.compute += r.compute_seconds();
      leg.bytes = static_cast<double>(r.bytes_sent);
      leg.messages = static_cast<double>(r.messages);
    }
    if (any) stage.parallel.push_back(leg);
  }
  if (stage.parallel.empty()) return {};
  return {{stage}, "ranks side by side: the slowest rank's compute and its ring messages"};
}

}  // namespace quartet::trainers::data_parallel

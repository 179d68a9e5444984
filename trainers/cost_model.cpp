#include "trainers/cost_model.h"

namespace quartet::trainers {

CriticalPath one_process_path(const std::vector<RoleRecords>& roles) {
  const RoleRecords* process = clock_role(roles);
  if (!process) return {};
  PathLeg leg;
  for (const nlohmann::json& line : process->records)
    if (const RecordView r = read_record(line); r.is_step()) leg.compute += r.compute_seconds();
  return {{PathStage{{leg}}}, "one process: its compute"};
}

}  // namespace quartet::trainers

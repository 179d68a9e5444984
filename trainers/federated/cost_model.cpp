#include <algorithm>

#include "trainers/federated/federated.h"

namespace quartet::trainers::federated {

// Reads the "round" object server.cpp writes into each step record.
CriticalPath critical_path(const std::vector<RoleRecords>& roles) {
  const RoleRecords* server = clock_role(roles);
  if (!server) return {};
  CriticalPath path{{}, "per round: the slowest client's download, training and upload, then aggregation"};
  for (const nlohmann::json& r : server->records) {
    const nlohmann::json& round = member(r, "round");
    if (!read_record(r).is_step() || !member(round, "clients").is_array()) continue;
    const nlohmann::json& clients = round["clients"];
    const double messages = number(member(round, "bytes"), "messages") / std::max<double>(1.0, clients.size());
    PathStage stage;
    for (const nlohmann::json& c : clients)
      stage.parallel.push_back({number(c, "compute"), number(c, "bytes_down") + number(c, "bytes_up"), messages});
    if (stage.parallel.empty()) stage.parallel.push_back({});
    path.stages.push_back(std::move(stage));
    path.stages.push_back(PathStage{{PathLeg{number(member(round, "time"), "aggregation"), 0.0, 0.0}}});
  }
  return path;
}

}  // namespace quartet::trainers::federated

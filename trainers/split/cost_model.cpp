#include "trainers/split/split.h"

namespace quartet::trainers::split {

namespace {

double compute_of(const nlohmann::json& c) {
  return number(c, "forward") + number(c, "backward") + number(c, "optimizer") + number(c, "data");
}

PathLeg turn_leg(const nlohmann::json& turn, bool with_server) {
  PathLeg leg;
  leg.compute = compute_of(member(turn, "client_compute"));
  if (with_server) leg.compute += compute_of(member(turn, "server_compute"));
  const nlohmann::json& traffic = member(turn, "traffic");
  if (traffic.is_object())
    for (const auto& [kind, c] : traffic.items()) {
      leg.bytes += number(c, "sent") + number(c, "received");
      leg.messages += number(c, "messages");
    }
  return leg;
}

}  // namespace

// Reads the "split" object server.cpp writes into each step record.
CriticalPath critical_path(const std::vector<RoleRecords>& roles) {
  const RoleRecords* server = clock_role(roles);
  if (!server) return {};
  CriticalPath path{{}, "clients in turn: every turn's client and server compute and traffic"};
  for (const nlohmann::json& r : server->records) {
    const nlohmann::json& record = member(r, "split");
    if (!read_record(r).is_step() || !member(record, "turns").is_array()) continue;
    if (text(record, "variant") != "splitfed") {
      for (const nlohmann::json& turn : record["turns"]) path.stages.push_back(PathStage{{turn_leg(turn, true)}});
      continue;
    }
    path.model = "SplitFed: the slowest client's compute and traffic, then the server's compute";
    PathStage clients;
    double server_compute = 0.0;
    for (const nlohmann::json& turn : record["turns"]) {
      clients.parallel.push_back(turn_leg(turn, false));
      server_compute += compute_of(member(turn, "server_compute"));
    }
    if (!clients.parallel.empty()) path.stages.push_back(std::move(clients));
    path.stages.push_back(PathStage{{PathLeg{server_compute, 0.0, 0.0}}});
  }
  return path;
}

}  // namespace quartet::trainers::split

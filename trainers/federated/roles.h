#pragma once

// The federated regime's settings and its two kinds of role.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "trainers/federated/strategy.h"
#include "trainers/regime.h"
#include "workloads/partition.h"

namespace quartet::trainers::federated {

struct FederatedSettings {
  int64_t clients = 10;        // K logical clients
  double fraction = 1.0;       // C: clients asked per round = max(1, round(C K)), at least min_clients
  int64_t local_epochs = 1;    // E
  int64_t rounds = 1;
  workloads::PartitionSpec partition;  // clients and seed are filled from the arm
  StrategyConfig strategy;
  double deadline_s = 600.0;   // a round waits this long for its clients, from dispatch
  int64_t min_clients = 1;     // fewer updates by the deadline: the round keeps the old weights
  int64_t processes = 1;       // pool processes hosting the virtual clients
  std::string compress = "none";  // none, fp16, topk (client -> server updates)
  double topk_fraction = 0.01;
  std::string link = "loopback";  // transport/link.h preset for every client connection
  double join_timeout_s = 300.0;  // how long the server waits for every client to connect
};

// From an arm's JSON (spec fields, defaults filled by the spec; missing fields take the
// defaults above, processes min(cores, clients)). Throws std::invalid_argument naming the
// field for a value out of range.
FederatedSettings federated_settings(const nlohmann::json& arm);

// The coordinator keys where the server publishes its address and token.
std::string server_address_key(const std::string& arm);
std::string server_token_key(const std::string& arm);

// requires ctx.coordinator (rendezvous), ctx.workload
void run_server(const RoleContext& ctx, const FederatedSettings& settings);
// Hosts clients c with c % processes == index, one connection each; trains one at a time.
void run_pool(const RoleContext& ctx, const FederatedSettings& settings, int64_t index);

}  // namespace quartet::trainers::federated

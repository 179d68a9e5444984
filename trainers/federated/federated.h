#pragma once

// federated: K virtual clients train locally on their own partitions and a server
// combines their updates once a round: an aggregator (the weighted mean, or a robust one:
// federated/robust.h), then a strategy (FedAvg, FedProx, FedAvgM, FedAdagrad, FedAdam,
// FedYogi). A server role runs the rounds (federated/server.cpp), pool roles host the
// virtual clients (federated/pool.cpp); the strategy (federated/strategy.h) decides whom
// to ask and what to make of the aggregate.
// docs/federated.md. Roles "server" and "pool0".."pool<P-1>".

#include <cstdint>
#include <optional>
#include <string>

#include "trainers/federated/robust.h"
#include "trainers/federated/privacy.h"
#include "trainers/federated/strategy.h"
#include "trainers/regime.h"
#include "workloads/partition.h"

namespace quartet::trainers::federated {

struct Settings : RegimeSettings {
  int64_t clients = 10;        // K logical clients
  double fraction = 1.0;       // C: clients asked per round = max(1, round(C K)), at least min_clients
  int64_t local_epochs = 1;    // E, at the train batch
  int64_t rounds = 1;
  workloads::PartitionSpec partition;  // its clients and seed are the arm's
  std::string strategy = "fedavg";
  double mu = 0.01;            // fedprox; other strategies: 0
  double server_momentum = 0.9;  // fedavgm; other strategies: 0 unless given
  std::optional<double> server_lr;  // filled by the regime: 1.0, or 0.1 for the FedOpt strategies
  double beta1 = 0.9;          // FedOpt strategies
  double beta2 = 0.99;         // fedadam, fedyogi
  double tau = 1e-3;           // FedOpt strategies
  std::string aggregator = "mean";  // mean (FedAvg's weighted), median, trimmed_mean, krum
  double trim_fraction = 0.1;
  int64_t krum_byzantine = 1;
  int64_t krum_select = 1;
  int64_t byzantine_clients = 0;     // clients 0 .. k-1 send corrupted updates
  std::string byzantine_attack = "sign_flip";
  double byzantine_scale = 4.0;
  double deadline_s = 600.0;   // a round waits this long for its clients, from dispatch
  int64_t min_clients = 1;     // fewer updates by the deadline: the round keeps the old weights
  std::optional<int64_t> processes;  // pool processes hosting the clients; filled: min(cores, clients)
  std::string compress = "none";     // none, fp16, topk (client -> server updates)
  double topk_fraction = 0.01;
  double join_timeout_s = 300.0;  // how long the server waits for every pool to connect (not a spec field)
  double dp_clip = 0.0;              // DP-FedAvg's S: L2 bound on each client's update; 0: no DP
  double dp_noise_multiplier = 0.0;  // z: the mean of n clipped updates gets N(0, (z S / n)^2)
  double dp_delta = 1e-5;            // the delta epsilon is accounted at

  static const SettingsTable<Settings>& table();
  StrategyConfig strategy_config() const {
    return {strategy, mu, server_momentum, server_lr.value(), beta1, beta2, tau};
  }
  AggregatorConfig aggregator_config() const { return {aggregator, trim_fraction, krum_byzantine, krum_select}; }
  DpConfig dp_config() const { return {dp_clip, dp_noise_multiplier, dp_delta}; }
  int64_t pools() const { return processes.value_or(1); }
};

const Regime& regime();

// The cost model, from the server's round records: per round the sampled clients side by
// side (download, training, upload), then the aggregation.
CriticalPath critical_path(const std::vector<RoleRecords>& roles);

}  // namespace quartet::trainers::federated

#pragma once

// Federated strategies after Flower's split: a strategy says whom to ask each round and
// how to combine what they send; the round loop (trainers/federated.cpp) and the
// transport know nothing of it. Aggregation is pure: the same inputs give the same
// bits, whatever order the clients answered in.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace quartet::trainers::fl {

// A model's state as flat float buffers, one per state_dict tensor, in state_dict order.
using Params = std::vector<std::vector<float>>;

// What one client sends back from a round: its new weights and how many samples its
// partition holds (the FedAvg weight).
struct ClientResult {
  int64_t client = 0;
  int64_t samples = 0;
  Params weights;
};

// FedAvg (McMahan et al. 2017): sum_k n_k w_k / sum_k n_k, element by element.
// requires at least one result, every samples >= 1, every weights shaped alike
// ensures each element is accumulated in double over the results in ascending client
// order and rounded to float once, so the result does not depend on arrival order
// throws std::invalid_argument naming the first mismatch
Params weighted_average(std::span<const ClientResult> results);

// FedAvgM (Hsu et al. 2019): the pseudo-gradient d = global - average drives server
// momentum: velocity = beta * velocity + d; global -= server_lr * velocity.
// An empty velocity starts at zero (it is resized to global's shape).
// requires average shaped as global
void server_momentum_step(Params& global, const Params& average, Params& velocity, double beta, double server_lr);

// FedProx (Li et al. 2020): the gradient of (mu / 2) ||w - w_global||^2 added to a local
// gradient: grad += mu * (weights - global). requires equal sizes.
void add_proximal_gradient(std::span<float> grad, std::span<const float> weights, std::span<const float> global,
                           float mu);

// How many clients a round asks: max(1, round(fraction * num_clients)), at least
// min_clients, at most num_clients.
int64_t clients_per_round(int64_t num_clients, double fraction, int64_t min_clients = 1);

// The clients of round `round` (1-based): `count` distinct ids in [0, num_clients),
// ascending, drawn by a partial Fisher-Yates seeded from (seed, round) alone, so a
// resumed run asks the same clients. requires 1 <= count <= num_clients.
std::vector<int64_t> sample_clients(int64_t num_clients, int64_t count, uint64_t seed, int64_t round);

struct StrategyConfig {
  std::string name = "fedavg";    // fedavg, fedprox, fedavgm
  double mu = 0.01;               // fedprox: proximal weight
  double server_momentum = 0.9;   // fedavgm: beta
  double server_lr = 1.0;         // fedavgm: server learning rate
};

std::vector<std::string> strategy_names();

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // The proximal weight clients add to their loss (FedProx); 0 for the others.
  virtual double proximal_mu() const { return 0.0; }
  // The next global weights from the current ones and this round's results.
  // requires results non-empty, shaped as global
  virtual Params aggregate(const Params& global, std::span<const ClientResult> results) = 0;
  // Server state kept across rounds (FedAvgM's velocity), for checkpoints; empty when none.
  virtual Params state() const { return {}; }
  virtual void load_state(Params /*state*/) {}
};

// Throws std::invalid_argument listing strategy_names() for an unknown name.
std::unique_ptr<Strategy> make_strategy(const StrategyConfig& config);

}  // namespace quartet::trainers::fl

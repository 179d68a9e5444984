#pragma once

// Federated strategies after Flower's split: a strategy says whom to ask each round and
// how to combine what they send; the round loop (trainers/federated/federated.cpp) and the
// transport know nothing of it. Aggregation is pure: the same inputs give the same
// bits, whatever order the clients answered in.

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace quartet::trainers::federated {

// A model's state as flat float buffers, one per state_dict tensor, in state_dict order.
using Params = std::vector<std::vector<float>>;

// What one client sends back from a round: its new weights and how many samples its
// partition holds (the FedAvg weight).
struct ClientResult {
  int64_t client = 0;
  int64_t samples = 0;
  Params weights;
};

// Throws std::invalid_argument naming the client when samples < 1 or its weights are not
// shaped as `sizes` (values per tensor); `who` starts the message.
void check_result(const ClientResult& r, std::span<const size_t> sizes, const std::string& who);

// FedAvg's weighted mean sum_k n_k w_k / sum_k n_k, fed one client at a time in any
// order. Each result is added to a double accumulator once every client before it (in
// ascending client order) has been added or skipped, and its weights are then released:
// the server holds only results that arrived ahead of a slower client, not the round's
// (200 clients of a 0.94 MB model at C = 1.0 held 218 MiB when a round's updates were
// kept until all had arrived). Adding in client order keeps every element's sum, and so
// the mean, the same bit for bit whatever order the results arrive in.
class OrderedAverage {
 public:
  // clients: the round's clients, any order, no repeats; sizes: values per tensor.
  OrderedAverage(std::vector<int64_t> clients, std::vector<size_t> sizes);
  // throws std::invalid_argument naming the client when it is not one of the round's or
  // was already added or skipped, when samples < 1 or the weights are shaped otherwise
  // A result added when its turn comes is not copied; one held is (the rvalue form moves).
  void add(const ClientResult& result);
  void add(ClientResult&& result);
  // A client whose result will not come (failed, dropped); unknown or repeated: throws.
  void skip(int64_t client);
  int64_t added() const { return added_; }
  size_t held() const { return held_.size(); }
  size_t peak_held() const { return peak_held_; }
  // Adds what is still held (clients that never answered count as skipped) and returns
  // the mean; requires added() >= 1, else throws std::invalid_argument.
  Params finish();

 private:
  size_t check(const ClientResult& r) const;  // its index in order_, or throws
  void fold_ready();
  void accumulate(const ClientResult& r);

  std::vector<int64_t> order_;               // the round's clients, ascending
  size_t next_ = 0;                          // index into order_ of the next to add
  std::vector<int> state_;                   // per index: 0 waiting, 1 held, 2 done
  std::map<size_t, ClientResult> held_;      // results waiting for an earlier client
  std::vector<size_t> sizes_;
  std::vector<std::vector<double>> acc_;
  double total_ = 0.0;
  int64_t added_ = 0;
  size_t peak_held_ = 0;
};

// FedAvg (McMahan et al. 2017) over a whole round's results: OrderedAverage fed with them.
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

// FedOpt (Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2): the
// pseudo-gradient d = average - global (a step towards the clients) drives an adaptive
// server optimizer, elementwise:
//   m = beta1 m + (1 - beta1) d
//   v = v + d^2                                  adagrad
//   v = beta2 v + (1 - beta2) d^2                adam
//   v = v - (1 - beta2) d^2 sign(v - d^2)        yogi (sign(0) = 0)
//   global += server_lr m / (sqrt(v) + tau)
// This step has no bias correction (the paper's); the fedadam strategy scales server_lr
// by fedadam_step_scale first, as Flower's FedAdam does. Empty m and v start at zero
// (Flower's choice; the paper asks v_{-1} >= tau^2, which only matters where d stays 0).
// Each element is computed in double and stored as float.
// requires average shaped as global, m and v empty or shaped as global
enum class Adaptivity { adagrad, adam, yogi };
void fedopt_step(Params& global, const Params& average, Params& m, Params& v, Adaptivity kind, double server_lr,
                 double beta1, double beta2, double tau);

// Flower's FedAdam bias correction (flwr/server/strategy/fedadam.py, aggregate_fit):
// eta_t = eta sqrt(1 - beta2^(r + 1)) / (1 - beta1^(r + 1)) in server round r (from 1),
// Kingma and Ba's alpha_t with t = r + 1. This returns the factor. requires beta1 < 1.
double fedadam_step_scale(double beta1, double beta2, int64_t round);

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

// The arm's strategy settings (federated::Settings, which holds their defaults).
struct StrategyConfig {
  std::string name;               // fedavg, fedprox, fedavgm, fedadagrad, fedadam, fedyogi
  double mu = 0.0;                // fedprox: proximal weight
  double server_momentum = 0.0;   // fedavgm: beta
  double server_lr = 1.0;         // fedavgm and the FedOpt strategies: server learning rate
  double beta1 = 0.9, beta2 = 0.99, tau = 1e-3;  // the FedOpt strategies
};

std::vector<std::string> strategy_names();

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // The proximal weight clients add to their loss (FedProx); 0 for the others.
  virtual double proximal_mu() const { return 0.0; }
  // The next global weights from the current ones and the weighted mean of this round's
  // results (OrderedAverage), in server round `round` (from 1, as Flower counts; a round
  // that kept the weights is counted too). requires average shaped as global
  virtual Params aggregate(const Params& global, Params average, int64_t round) = 0;
  // Server state kept across rounds, for checkpoints: FedAvgM's velocity, FedOpt's m then
  // v; each a copy of the model's shapes, in its order. Empty when none (yet).
  virtual Params state() const { return {}; }
  virtual void load_state(Params /*state*/) {}
};

// Throws std::invalid_argument listing strategy_names() for an unknown name.
std::unique_ptr<Strategy> make_strategy(const StrategyConfig& config);

}  // namespace quartet::trainers::federated

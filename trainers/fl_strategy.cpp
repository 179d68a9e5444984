#include "trainers/fl_strategy.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "engine/random.h"
#include "workloads/sampler.h"

namespace quartet::trainers::fl {

Params weighted_average(std::span<const ClientResult> results) {
  if (results.empty()) throw std::invalid_argument("weighted_average: no client results");
  std::vector<size_t> order(results.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return results[a].client < results[b].client; });
  const Params& first = results[order[0]].weights;
  double total = 0.0;
  for (const ClientResult& r : results) {
    if (r.samples < 1)
      throw std::invalid_argument("weighted_average: client " + std::to_string(r.client) + " reports " +
                                  std::to_string(r.samples) + " samples; expected >= 1");
    if (r.weights.size() != first.size())
      throw std::invalid_argument("weighted_average: client " + std::to_string(r.client) + " sent " +
                                  std::to_string(r.weights.size()) + " tensors, expected " +
                                  std::to_string(first.size()));
    for (size_t t = 0; t < first.size(); ++t)
      if (r.weights[t].size() != first[t].size())
        throw std::invalid_argument("weighted_average: client " + std::to_string(r.client) + " tensor " +
                                    std::to_string(t) + " has " + std::to_string(r.weights[t].size()) +
                                    " values, expected " + std::to_string(first[t].size()));
    total += static_cast<double>(r.samples);
  }
  Params out(first.size());
  std::vector<double> acc;
  for (size_t t = 0; t < first.size(); ++t) {
    acc.assign(first[t].size(), 0.0);
    for (size_t i : order) {
      const double w = static_cast<double>(results[i].samples);
      const std::vector<float>& src = results[i].weights[t];
      for (size_t k = 0; k < acc.size(); ++k) acc[k] += w * static_cast<double>(src[k]);
    }
    out[t].resize(acc.size());
    for (size_t k = 0; k < acc.size(); ++k) out[t][k] = static_cast<float>(acc[k] / total);
  }
  return out;
}

void server_momentum_step(Params& global, const Params& average, Params& velocity, double beta, double server_lr) {
  if (average.size() != global.size())
    throw std::invalid_argument("server_momentum_step: average and global differ in tensor count");
  if (velocity.empty()) {
    velocity.resize(global.size());
    for (size_t t = 0; t < global.size(); ++t) velocity[t].assign(global[t].size(), 0.0f);
  }
  for (size_t t = 0; t < global.size(); ++t) {
    if (average[t].size() != global[t].size() || velocity[t].size() != global[t].size())
      throw std::invalid_argument("server_momentum_step: tensor " + std::to_string(t) + " differs in size");
    for (size_t k = 0; k < global[t].size(); ++k) {
      const double d = static_cast<double>(global[t][k]) - average[t][k];
      const double v = beta * velocity[t][k] + d;
      velocity[t][k] = static_cast<float>(v);
      global[t][k] = static_cast<float>(global[t][k] - server_lr * v);
    }
  }
}

void add_proximal_gradient(std::span<float> grad, std::span<const float> weights, std::span<const float> global,
                           float mu) {
  if (grad.size() != weights.size() || weights.size() != global.size())
    throw std::invalid_argument("add_proximal_gradient: sizes differ");
  for (size_t k = 0; k < grad.size(); ++k) grad[k] += mu * (weights[k] - global[k]);
}

int64_t clients_per_round(int64_t num_clients, double fraction, int64_t min_clients) {
  int64_t m = std::max<int64_t>(1, std::llround(fraction * static_cast<double>(num_clients)));
  m = std::max(m, min_clients);
  return std::min(m, num_clients);
}

std::vector<int64_t> sample_clients(int64_t num_clients, int64_t count, uint64_t seed, int64_t round) {
  if (count < 1 || count > num_clients)
    throw std::invalid_argument("sample_clients: count " + std::to_string(count) + " outside [1, " +
                                std::to_string(num_clients) + "]");
  std::vector<int64_t> ids(static_cast<size_t>(num_clients));
  std::iota(ids.begin(), ids.end(), int64_t{0});
  // A stream of its own: 0x5eed... keeps it apart from the epoch shuffles of the same seed.
  engine::Generator gen(workloads::mix_seed(workloads::mix_seed(seed ^ 0x5eedc11e47f1ULL) ^ static_cast<uint64_t>(round)));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t j = i + static_cast<int64_t>(gen.below(static_cast<uint64_t>(num_clients - i)));
    std::swap(ids[static_cast<size_t>(i)], ids[static_cast<size_t>(j)]);
  }
  ids.resize(static_cast<size_t>(count));
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<std::string> strategy_names() { return {"fedavg", "fedprox", "fedavgm"}; }

namespace {

class FedAvg : public Strategy {
 public:
  std::string name() const override { return "fedavg"; }
  Params aggregate(const Params&, std::span<const ClientResult> results) override { return weighted_average(results); }
};

// FedProx changes the clients' objective only; the server averages as FedAvg does.
class FedProx : public FedAvg {
 public:
  explicit FedProx(double mu) : mu_(mu) {}
  std::string name() const override { return "fedprox"; }
  double proximal_mu() const override { return mu_; }

 private:
  double mu_;
};

class FedAvgM : public Strategy {
 public:
  FedAvgM(double beta, double server_lr) : beta_(beta), server_lr_(server_lr) {}
  std::string name() const override { return "fedavgm"; }
  Params aggregate(const Params& global, std::span<const ClientResult> results) override {
    Params next = global;
    server_momentum_step(next, weighted_average(results), velocity_, beta_, server_lr_);
    return next;
  }
  Params state() const override { return velocity_; }
  void load_state(Params state) override { velocity_ = std::move(state); }

 private:
  double beta_, server_lr_;
  Params velocity_;
};

}  // namespace

std::unique_ptr<Strategy> make_strategy(const StrategyConfig& c) {
  if (c.name == "fedavg") return std::make_unique<FedAvg>();
  if (c.name == "fedprox") return std::make_unique<FedProx>(c.mu);
  if (c.name == "fedavgm") return std::make_unique<FedAvgM>(c.server_momentum, c.server_lr);
  throw std::invalid_argument("unknown strategy \"" + c.name + "\"; known: fedavg, fedprox, fedavgm");
}

}  // namespace quartet::trainers::fl

#include "trainers/federated/strategy.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "engine/random.h"
#include "workloads/sampler.h"

namespace quartet::trainers::federated {

OrderedAverage::OrderedAverage(std::vector<int64_t> clients, std::vector<size_t> sizes)
    : order_(std::move(clients)), state_(order_.size(), 0), sizes_(std::move(sizes)) {
  std::sort(order_.begin(), order_.end());
  if (std::adjacent_find(order_.begin(), order_.end()) != order_.end())
    throw std::invalid_argument("FedAvg: a client is listed twice in the round");
  acc_.resize(sizes_.size());
  for (size_t t = 0; t < sizes_.size(); ++t) acc_[t].assign(sizes_[t], 0.0);
}

namespace {

// The index of client in the sorted round, or throws naming it.
size_t index_of(const std::vector<int64_t>& order, int64_t client) {
  const auto it = std::lower_bound(order.begin(), order.end(), client);
  if (it == order.end() || *it != client)
    throw std::invalid_argument("FedAvg: client " + std::to_string(client) + " is not one of this round's");
  return static_cast<size_t>(it - order.begin());
}

}  // namespace

void check_result(const ClientResult& r, std::span<const size_t> sizes, const std::string& who) {
  if (r.samples < 1)
    throw std::invalid_argument(who + ": client " + std::to_string(r.client) + " reports " + std::to_string(r.samples) +
                                " samples; expected >= 1");
  if (r.weights.size() != sizes.size())
    throw std::invalid_argument(who + ": client " + std::to_string(r.client) + " sent " +
                                std::to_string(r.weights.size()) + " tensors, expected " + std::to_string(sizes.size()));
  for (size_t t = 0; t < sizes.size(); ++t)
    if (r.weights[t].size() != sizes[t])
      throw std::invalid_argument(who + ": client " + std::to_string(r.client) + " tensor " + std::to_string(t) +
                                  " has " + std::to_string(r.weights[t].size()) + " values, expected " +
                                  std::to_string(sizes[t]));
}

size_t OrderedAverage::check(const ClientResult& r) const {
  const size_t i = index_of(order_, r.client);
  if (state_[i] != 0)
    throw std::invalid_argument("FedAvg: client " + std::to_string(r.client) + " answered twice");
  check_result(r, sizes_, "FedAvg");
  return i;
}

void OrderedAverage::add(const ClientResult& r) {
  const size_t i = check(r);
  if (i == next_) {  // its turn: added at once, never copied
    accumulate(r);
    state_[i] = 2;
  } else {
    state_[i] = 1;
    held_.emplace(i, r);
  }
  fold_ready();
  peak_held_ = std::max(peak_held_, held_.size());
}

void OrderedAverage::add(ClientResult&& r) {
  const size_t i = check(r);
  state_[i] = 1;
  held_.emplace(i, std::move(r));
  fold_ready();
  peak_held_ = std::max(peak_held_, held_.size());
}

void OrderedAverage::skip(int64_t client) {
  const size_t i = index_of(order_, client);
  if (state_[i] != 0) throw std::invalid_argument("FedAvg: client " + std::to_string(client) + " answered twice");
  state_[i] = 2;
  fold_ready();
}

void OrderedAverage::accumulate(const ClientResult& r) {
  const double w = static_cast<double>(r.samples);
  for (size_t t = 0; t < sizes_.size(); ++t) {
    std::vector<double>& a = acc_[t];
    const std::vector<float>& src = r.weights[t];
    for (size_t k = 0; k < a.size(); ++k) a[k] += w * static_cast<double>(src[k]);
  }
  total_ += w;
  ++added_;
}

// Adds the held results at the front of the order, passing skipped clients.
void OrderedAverage::fold_ready() {
  while (next_ < order_.size() && state_[next_] != 0) {
    if (state_[next_] == 1) {
      auto it = held_.find(next_);
      accumulate(it->second);
      held_.erase(it);
      state_[next_] = 2;
    }
    ++next_;
  }
}

Params OrderedAverage::finish() {
  for (size_t i = next_; i < order_.size(); ++i)
    if (state_[i] == 0) state_[i] = 2;  // never answered
  fold_ready();
  if (added_ < 1) throw std::invalid_argument("FedAvg: no client results");
  Params out(sizes_.size());
  for (size_t t = 0; t < sizes_.size(); ++t) {
    out[t].resize(sizes_[t]);
    for (size_t k = 0; k < sizes_[t]; ++k) out[t][k] = static_cast<float>(acc_[t][k] / total_);
  }
  return out;
}

Params weighted_average(std::span<const ClientResult> results) {
  if (results.empty()) throw std::invalid_argument("FedAvg: no client results");
  std::vector<int64_t> clients;
  for (const ClientResult& r : results) clients.push_back(r.client);
  std::vector<size_t> sizes;
  for (const std::vector<float>& t : results.front().weights) sizes.push_back(t.size());
  OrderedAverage average(std::move(clients), std::move(sizes));
  // In client order, so that each result is added at once, without a copy.
  std::vector<const ClientResult*> sorted;
  for (const ClientResult& r : results) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(), [](const ClientResult* a, const ClientResult* b) { return a->client < b->client; });
  for (const ClientResult* r : sorted) average.add(*r);
  return average.finish();
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

namespace {

void zeros_like(Params& p, const Params& like) {
  if (!p.empty()) return;
  p.resize(like.size());
  for (size_t t = 0; t < like.size(); ++t) p[t].assign(like[t].size(), 0.0f);
}

double sign(double x) { return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : 0.0; }

}  // namespace

void fedopt_step(Params& global, const Params& average, Params& m, Params& v, Adaptivity kind, double server_lr,
                 double beta1, double beta2, double tau) {
  if (average.size() != global.size()) throw std::invalid_argument("fedopt_step: average and global differ in tensor count");
  zeros_like(m, global);
  zeros_like(v, global);
  for (size_t t = 0; t < global.size(); ++t) {
    if (average[t].size() != global[t].size() || m[t].size() != global[t].size() || v[t].size() != global[t].size())
      throw std::invalid_argument("fedopt_step: tensor " + std::to_string(t) + " differs in size");
    for (size_t k = 0; k < global[t].size(); ++k) {
      const double d = static_cast<double>(average[t][k]) - global[t][k];
      const double mk = beta1 * m[t][k] + (1.0 - beta1) * d;
      double vk = v[t][k];
      switch (kind) {
        case Adaptivity::adagrad: vk += d * d; break;
        case Adaptivity::adam: vk = beta2 * vk + (1.0 - beta2) * d * d; break;
        case Adaptivity::yogi: vk -= (1.0 - beta2) * d * d * sign(vk - d * d); break;
      }
      m[t][k] = static_cast<float>(mk);
      v[t][k] = static_cast<float>(vk);
      global[t][k] = static_cast<float>(global[t][k] + server_lr * mk / (std::sqrt(vk) + tau));
    }
  }
}

double fedadam_step_scale(double beta1, double beta2, int64_t round) {
  const double t = static_cast<double>(round) + 1.0;
  return std::sqrt(1.0 - std::pow(beta2, t)) / (1.0 - std::pow(beta1, t));
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

std::vector<std::string> strategy_names() { return {"fedavg", "fedprox", "fedavgm", "fedadagrad", "fedadam", "fedyogi"}; }

namespace {

class FedAvg : public Strategy {
 public:
  std::string name() const override { return "fedavg"; }
  Params aggregate(const Params&, Params average, int64_t) override { return average; }
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
  Params aggregate(const Params& global, Params average, int64_t) override {
    Params next = global;
    server_momentum_step(next, average, velocity_, beta_, server_lr_);
    return next;
  }
  Params state() const override { return velocity_; }
  void load_state(Params state) override { velocity_ = std::move(state); }

 private:
  double beta_, server_lr_;
  Params velocity_;
};

// The state is m's tensors then v's, so that a checkpoint holds both.
class FedOpt : public Strategy {
 public:
  FedOpt(std::string name, Adaptivity kind, const StrategyConfig& c) : name_(std::move(name)), kind_(kind), c_(c) {}
  std::string name() const override { return name_; }
  Params aggregate(const Params& global, Params average, int64_t round) override {
    Params next = global;
    const double scale = kind_ == Adaptivity::adam ? fedadam_step_scale(c_.beta1, c_.beta2, round) : 1.0;
    fedopt_step(next, average, m_, v_, kind_, c_.server_lr * scale, c_.beta1, c_.beta2, c_.tau);
    return next;
  }
  Params state() const override {
    Params s = m_;
    s.insert(s.end(), v_.begin(), v_.end());
    return s;
  }
  void load_state(Params state) override {
    if (state.size() % 2 != 0)
      throw std::invalid_argument(name_ + ": saved state holds " + std::to_string(state.size()) +
                                  " tensors; expected m's and v's, as many each");
    const auto half = state.begin() + static_cast<std::ptrdiff_t>(state.size() / 2);
    m_.assign(std::make_move_iterator(state.begin()), std::make_move_iterator(half));
    v_.assign(std::make_move_iterator(half), std::make_move_iterator(state.end()));
  }

 private:
  std::string name_;
  Adaptivity kind_;
  StrategyConfig c_;
  Params m_, v_;
};

}  // namespace

std::unique_ptr<Strategy> make_strategy(const StrategyConfig& c) {
  if (c.name == "fedavg") return std::make_unique<FedAvg>();
  if (c.name == "fedprox") return std::make_unique<FedProx>(c.mu);
  if (c.name == "fedavgm") return std::make_unique<FedAvgM>(c.server_momentum, c.server_lr);
  if (c.name == "fedadagrad") return std::make_unique<FedOpt>(c.name, Adaptivity::adagrad, c);
  if (c.name == "fedadam") return std::make_unique<FedOpt>(c.name, Adaptivity::adam, c);
  if (c.name == "fedyogi") return std::make_unique<FedOpt>(c.name, Adaptivity::yogi, c);
  std::string known;
  for (const std::string& n : strategy_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown strategy \"" + c.name + "\"; known: " + known);
}

}  // namespace quartet::trainers::federated

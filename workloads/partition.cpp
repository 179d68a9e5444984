#include "workloads/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>
#include <utility>

#include "workloads/sampler.h"

namespace quartet::workloads {
namespace {

constexpr uint64_t kIidStream = 0x696964ULL;               // "iid"
constexpr uint64_t kDirichletStream = 0x646972696368ULL;   // "dirich"
constexpr uint64_t kShardsStream = 0x7368617264ULL;        // "shard"

// [0, 1) with 53 random bits.
double uniform01(engine::Generator& gen) { return static_cast<double>(gen.next_u64() >> 11) * 0x1.0p-53; }
// (0, 1]: safe to take the log of.
double uniform_open0(engine::Generator& gen) {
  return (static_cast<double>(gen.next_u64() >> 11) + 1.0) * 0x1.0p-53;
}
double standard_normal(engine::Generator& gen) {
  const double u1 = uniform_open0(gen), u2 = uniform01(gen);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// log of a Gamma(alpha, 1) draw; stays finite where the draw itself underflows.
double sample_log_gamma(engine::Generator& gen, double alpha) {
  if (alpha < 1.0) {
    // Gamma(a) = Gamma(a + 1) * U^(1/a) (Marsaglia and Tsang's boost for a < 1).
    const double boosted = sample_log_gamma(gen, alpha + 1.0);
    return boosted + std::log(uniform_open0(gen)) / alpha;
  }
  const double d = alpha - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = standard_normal(gen);
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    const double u = uniform_open0(gen);
    if (u < 1.0 - 0.0331 * x * x * x * x) return std::log(d * v);
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return std::log(d * v);
  }
}

void shuffle_in_place(std::vector<int64_t>& v, engine::Generator& gen) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<size_t>(gen.below(i))]);
}

void check_common(const std::vector<int32_t>& labels, int num_classes, int64_t clients) {
  const auto n = static_cast<int64_t>(labels.size());
  if (num_classes < 1)
    throw std::invalid_argument("partition num_classes: expected >= 1, got " + std::to_string(num_classes));
  if (n == 0) throw std::invalid_argument("partition: the dataset has no samples to partition");
  if (clients < 1 || clients > n)
    throw std::invalid_argument("partition clients: expected an integer in [1, " + std::to_string(n) +
                                "] (at most one client per sample), got " + std::to_string(clients));
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] < 0 || labels[i] >= num_classes)
      throw std::invalid_argument("partition: label " + std::to_string(labels[i]) + " of sample " +
                                  std::to_string(i) + " is outside [0, " + std::to_string(num_classes) + ")");
}

Partition finish(std::vector<std::vector<int64_t>> clients, const std::vector<int32_t>& labels, int num_classes) {
  Partition p;
  p.num_classes = num_classes;
  for (auto& c : clients) {
    std::sort(c.begin(), c.end());
    std::vector<int64_t> h(static_cast<size_t>(num_classes), 0);
    for (int64_t i : c) ++h[static_cast<size_t>(labels[static_cast<size_t>(i)])];
    p.histograms.push_back(std::move(h));
  }
  p.clients = std::move(clients);
  return p;
}

std::vector<int64_t> iota_vector(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

}  // namespace

std::vector<std::string> partition_kinds() { return {"iid", "dirichlet", "shards", "scanner"}; }

double sample_gamma(engine::Generator& gen, double alpha) {
  if (!(alpha > 0.0) || !std::isfinite(alpha))
    throw std::invalid_argument("sample_gamma: alpha must be a finite number > 0, got " + std::to_string(alpha));
  return std::exp(sample_log_gamma(gen, alpha));
}

std::vector<double> sample_dirichlet(engine::Generator& gen, int64_t k, double alpha) {
  if (k < 1) throw std::invalid_argument("sample_dirichlet: k must be >= 1, got " + std::to_string(k));
  if (!(alpha > 0.0) || !std::isfinite(alpha))
    throw std::invalid_argument("sample_dirichlet: alpha must be a finite number > 0, got " + std::to_string(alpha));
  std::vector<double> logs(static_cast<size_t>(k));
  for (double& l : logs) l = sample_log_gamma(gen, alpha);
  const double top = *std::max_element(logs.begin(), logs.end());
  double total = 0.0;
  for (double& l : logs) total += (l = std::exp(l - top));
  for (double& l : logs) l /= total;
  return logs;
}

Partition partition_iid(const std::vector<int32_t>& labels, int num_classes, int64_t clients, uint64_t seed) {
  check_common(labels, num_classes, clients);
  const auto n = static_cast<int64_t>(labels.size());
  engine::Generator gen(mix_seed(seed ^ kIidStream));
  std::vector<int64_t> order = iota_vector(n);
  shuffle_in_place(order, gen);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(clients));
  for (int64_t k = 0; k < clients; ++k)
    out[k].assign(order.begin() + k * n / clients, order.begin() + (k + 1) * n / clients);
  return finish(std::move(out), labels, num_classes);
}

Partition partition_dirichlet(const std::vector<int32_t>& labels, int num_classes, int64_t clients, double alpha,
                              uint64_t seed, int max_draws) {
  check_common(labels, num_classes, clients);
  if (!(alpha > 0.0) || !std::isfinite(alpha))
    throw std::invalid_argument("partition alpha: expected a finite number > 0, got " + std::to_string(alpha));
  if (max_draws < 1) throw std::invalid_argument("partition max_draws: expected >= 1, got " + std::to_string(max_draws));
  engine::Generator gen(mix_seed(seed ^ kDirichletStream));
  std::vector<std::vector<int64_t>> by_class(static_cast<size_t>(num_classes));
  for (size_t i = 0; i < labels.size(); ++i) by_class[static_cast<size_t>(labels[i])].push_back(static_cast<int64_t>(i));
  for (auto& c : by_class) shuffle_in_place(c, gen);

  for (int draw = 0; draw < max_draws; ++draw) {
    std::vector<std::vector<int64_t>> out(static_cast<size_t>(clients));
    for (const auto& members : by_class) {
      if (members.empty()) continue;
      const std::vector<double> p = sample_dirichlet(gen, clients, alpha);
      const auto m = static_cast<int64_t>(members.size());
      double cum = 0.0;
      int64_t begin = 0;
      for (int64_t k = 0; k < clients; ++k) {
        cum += p[static_cast<size_t>(k)];
        const int64_t end = k + 1 == clients ? m : std::min(m, static_cast<int64_t>(std::floor(cum * m)));
        if (end > begin) out[k].insert(out[k].end(), members.begin() + begin, members.begin() + end);
        begin = std::max(begin, end);
      }
    }
    const bool none_empty = std::all_of(out.begin(), out.end(), [](const auto& c) { return !c.empty(); });
    if (none_empty) return finish(std::move(out), labels, num_classes);
  }
  throw std::runtime_error("dirichlet partition: after " + std::to_string(max_draws) +
                           " draws some client still got no samples (clients = " + std::to_string(clients) +
                           ", alpha = " + std::to_string(alpha) + ", samples = " + std::to_string(labels.size()) +
                           "); raise alpha or use fewer clients");
}

Partition partition_shards(const std::vector<int32_t>& labels, int num_classes, int64_t clients, uint64_t seed,
                           int64_t shards_per_client) {
  check_common(labels, num_classes, clients);
  const auto n = static_cast<int64_t>(labels.size());
  if (shards_per_client < 1)
    throw std::invalid_argument("partition shards_per_client: expected >= 1, got " + std::to_string(shards_per_client));
  if (clients > n / shards_per_client)
    throw std::invalid_argument("partition clients: " + std::to_string(clients) + " clients x " +
                                std::to_string(shards_per_client) + " shards need at least " +
                                std::to_string(clients * shards_per_client) + " samples, the dataset has " +
                                std::to_string(n));
  engine::Generator gen(mix_seed(seed ^ kShardsStream));
  std::vector<int64_t> order = iota_vector(n);
  shuffle_in_place(order, gen);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return labels[static_cast<size_t>(a)] < labels[static_cast<size_t>(b)];
  });
  const int64_t shards = clients * shards_per_client;
  std::vector<int64_t> shard_order = iota_vector(shards);
  shuffle_in_place(shard_order, gen);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(clients));
  for (int64_t k = 0; k < clients; ++k)
    for (int64_t j = 0; j < shards_per_client; ++j) {
      const int64_t s = shard_order[static_cast<size_t>(k * shards_per_client + j)];
      out[k].insert(out[k].end(), order.begin() + s * n / shards, order.begin() + (s + 1) * n / shards);
    }
  return finish(std::move(out), labels, num_classes);
}

Partition partition_scanner(const std::vector<int32_t>& scanners, int num_scanners, int64_t clients) {
  if (clients > num_scanners)
    throw std::invalid_argument("partition clients: the scanner partition gives each client whole scanners, so at "
                                "most " + std::to_string(num_scanners) + " clients (the workload's scanners), got " +
                                std::to_string(clients));
  check_common(scanners, num_scanners, clients);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(clients));
  for (size_t i = 0; i < scanners.size(); ++i) out[scanners[i] % clients].push_back(static_cast<int64_t>(i));
  for (int64_t k = 0; k < clients; ++k)
    if (out[k].empty())
      throw std::invalid_argument("partition: with the scanner partition client " + std::to_string(k) +
                                  " holds no training sample (its scanners acquired none); use more volumes or "
                                  "fewer clients");
  Partition p = finish(std::move(out), scanners, num_scanners);
  p.counts = "scanner";
  return p;
}

Partition make_partition(const PartitionSpec& spec, const std::vector<int32_t>& labels, int num_classes) {
  if (spec.kind == "iid") return partition_iid(labels, num_classes, spec.clients, spec.seed);
  if (spec.kind == "dirichlet") return partition_dirichlet(labels, num_classes, spec.clients, spec.alpha, spec.seed);
  if (spec.kind == "shards")
    return partition_shards(labels, num_classes, spec.clients, spec.seed, spec.shards_per_client);
  if (spec.kind == "scanner")
    throw std::invalid_argument("partition kind scanner: partitions a volume workload's training volumes by "
                                "scanner, and these samples have none");
  std::string known;
  for (const auto& k : partition_kinds()) known += (known.empty() ? "" : ", ") + k;
  throw std::invalid_argument("partition kind: expected one of " + known + ", got \"" + spec.kind + "\"");
}

Partition make_partition(const PartitionSpec& spec, const ImageDataset& data) {
  return make_partition(spec, data.labels(), data.num_classes());
}

double mean_max_class_share(const Partition& p) {
  if (p.clients.empty()) return 0.0;
  double total = 0.0;
  for (size_t k = 0; k < p.clients.size(); ++k) {
    const int64_t size = static_cast<int64_t>(p.clients[k].size());
    if (size == 0) continue;
    const int64_t top = *std::max_element(p.histograms[k].begin(), p.histograms[k].end());
    total += static_cast<double>(top) / static_cast<double>(size);
  }
  return total / static_cast<double>(p.clients.size());
}

}  // namespace quartet::workloads

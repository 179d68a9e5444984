#include "trainers/federated/robust.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace quartet::trainers::federated {

std::vector<std::string> aggregator_names() { return {"mean", "median", "trimmed_mean", "krum"}; }

int64_t trimmed_per_side(double fraction, int64_t n) {
  return static_cast<int64_t>(std::floor(fraction * static_cast<double>(n) + 1e-9));
}

namespace {

std::string number(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

// The results in ascending client order, checked alike; throws naming `who`.
std::vector<const ClientResult*> sorted_checked(std::span<const ClientResult> results, const std::string& who) {
  if (results.empty()) throw std::invalid_argument(who + ": no client results");
  std::vector<const ClientResult*> sorted;
  for (const ClientResult& r : results) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(), [](const ClientResult* a, const ClientResult* b) { return a->client < b->client; });
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end(),
                                        [](const ClientResult* a, const ClientResult* b) { return a->client == b->client; });
  if (twice != sorted.end())
    throw std::invalid_argument(who + ": client " + std::to_string((*twice)->client) + " is listed twice");
  std::vector<size_t> sizes;
  for (const std::vector<float>& t : sorted.front()->weights) sizes.push_back(t.size());
  for (const ClientResult* r : sorted) check_result(*r, sizes, who);
  return sorted;
}

// Per element, `combine` of the clients' values of it, sorted ascending (so the result
// cannot depend on the clients' order).
template <class Combine>
Params per_element(const std::vector<const ClientResult*>& rs, Combine combine) {
  const Params& first = rs.front()->weights;
  Params out(first.size());
  std::vector<double> values(rs.size());
  for (size_t t = 0; t < first.size(); ++t) {
    out[t].resize(first[t].size());
    for (size_t k = 0; k < first[t].size(); ++k) {
      for (size_t i = 0; i < rs.size(); ++i) values[i] = rs[i]->weights[t][k];
      std::sort(values.begin(), values.end());
      out[t][k] = static_cast<float>(combine(values));
    }
  }
  return out;
}

double squared_distance(const Params& a, const Params& b) {
  double s = 0.0;
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t k = 0; k < a[t].size(); ++k) {
      const double d = static_cast<double>(a[t][k]) - b[t][k];
      s += d * d;
    }
  return s;
}

}  // namespace

std::string aggregator_misfit(const AggregatorConfig& c, int64_t n) {
  const std::string of_n = " the round's " + std::to_string(n) + " clients";
  if (c.name == "trimmed_mean") {
    const int64_t k = trimmed_per_side(c.trim_fraction, n);
    if (n - 2 * k < 1)
      return "trim_fraction: " + number(c.trim_fraction) + " drops " + std::to_string(k) +
             " from each end of" + of_n + ", leaving none; expected less than 0.5";
  } else if (c.name == "krum") {
    const int64_t f = c.krum_byzantine;
    if (n <= 2 * f + 2)
      return "krum_byzantine: " + std::to_string(f) + " needs more than 2f + 2 = " + std::to_string(2 * f + 2) +
             " clients a round, got " + std::to_string(n);
    if (c.krum_select > n - f)
      return "krum_select: " + std::to_string(c.krum_select) + " exceeds n - f = " + std::to_string(n - f) + " of" +
             of_n;
  }
  return "";
}

Params coordinate_median(std::span<const ClientResult> results) {
  return per_element(sorted_checked(results, "median"), [](const std::vector<double>& v) {
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
  });
}

Params trimmed_mean(std::span<const ClientResult> results, double trim_fraction) {
  const auto rs = sorted_checked(results, "trimmed_mean");
  const int64_t n = static_cast<int64_t>(rs.size());
  if (trim_fraction < 0.0) throw std::invalid_argument("trimmed_mean: trim_fraction must be >= 0");
  if (const std::string why = aggregator_misfit({.name = "trimmed_mean", .trim_fraction = trim_fraction}, n);
      !why.empty())
    throw std::invalid_argument("trimmed_mean: " + why);
  const size_t k = static_cast<size_t>(trimmed_per_side(trim_fraction, n));
  return per_element(rs, [k](const std::vector<double>& v) {
    const double sum = std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(k),
                                       v.end() - static_cast<std::ptrdiff_t>(k), 0.0);
    return sum / static_cast<double>(v.size() - 2 * k);
  });
}

Params krum(std::span<const ClientResult> results, int64_t byzantine, int64_t select) {
  const auto rs = sorted_checked(results, "krum");
  const int64_t n = static_cast<int64_t>(rs.size());
  if (byzantine < 0 || select < 1) throw std::invalid_argument("krum: expected krum_byzantine >= 0 and krum_select >= 1");
  if (const std::string why = aggregator_misfit({.name = "krum", .krum_byzantine = byzantine, .krum_select = select}, n);
      !why.empty())
    throw std::invalid_argument("krum: " + why);
  const size_t N = rs.size();
  std::vector<std::vector<double>> dist(N, std::vector<double>(N, 0.0));
  for (size_t i = 0; i < N; ++i)
    for (size_t j = i + 1; j < N; ++j) dist[i][j] = dist[j][i] = squared_distance(rs[i]->weights, rs[j]->weights);
  const size_t neighbours = static_cast<size_t>(n - byzantine - 2);
  std::vector<double> score(N);
  for (size_t i = 0; i < N; ++i) {
    std::vector<double> others;
    for (size_t j = 0; j < N; ++j)
      if (j != i) others.push_back(dist[i][j]);
    std::sort(others.begin(), others.end());
    score[i] = std::accumulate(others.begin(), others.begin() + static_cast<std::ptrdiff_t>(neighbours), 0.0);
  }
  std::vector<size_t> by_score(N);
  std::iota(by_score.begin(), by_score.end(), size_t{0});
  // rs is in client order, so a stable sort breaks ties by the lower id.
  std::stable_sort(by_score.begin(), by_score.end(), [&](size_t a, size_t b) { return score[a] < score[b]; });
  by_score.resize(static_cast<size_t>(select));
  std::sort(by_score.begin(), by_score.end());
  std::vector<int64_t> chosen;
  for (size_t i : by_score) chosen.push_back(rs[i]->client);
  std::vector<size_t> sizes;
  for (const std::vector<float>& t : rs.front()->weights) sizes.push_back(t.size());
  OrderedAverage average(std::move(chosen), std::move(sizes));
  for (size_t i : by_score) average.add(*rs[i]);  // in client order: each added at once, not copied
  return average.finish();
}

Params aggregate_round(const AggregatorConfig& c, std::span<const ClientResult> results) {
  if (c.name == "mean") return weighted_average(results);
  if (c.name == "median") return coordinate_median(results);
  if (c.name == "trimmed_mean") return trimmed_mean(results, c.trim_fraction);
  if (c.name == "krum") return krum(results, c.krum_byzantine, c.krum_select);
  throw std::invalid_argument("unknown aggregator \"" + c.name + "\"; known: mean, median, trimmed_mean, krum");
}

RoundAggregator::RoundAggregator(AggregatorConfig config, std::vector<int64_t> clients, std::vector<size_t> sizes)
    : config_(std::move(config)),
      mean_(config_.name == "mean" ? clients : std::vector<int64_t>{},
            config_.name == "mean" ? sizes : std::vector<size_t>{}),
      order_(config_.name == "mean" ? std::vector<int64_t>{} : std::move(clients)),
      sizes_(std::move(sizes)) {
  std::sort(order_.begin(), order_.end());
  if (std::adjacent_find(order_.begin(), order_.end()) != order_.end())
    throw std::invalid_argument(config_.name + ": a client is listed twice in the round");
  answered_.assign(order_.size(), false);
}

size_t RoundAggregator::index_of(int64_t client) const {
  const auto it = std::lower_bound(order_.begin(), order_.end(), client);
  if (it == order_.end() || *it != client)
    throw std::invalid_argument(config_.name + ": client " + std::to_string(client) + " is not one of this round's");
  const size_t i = static_cast<size_t>(it - order_.begin());
  if (answered_[i]) throw std::invalid_argument(config_.name + ": client " + std::to_string(client) + " answered twice");
  return i;
}

void RoundAggregator::add(ClientResult&& r) {
  if (config_.name == "mean") return mean_.add(std::move(r));
  const size_t i = index_of(r.client);
  check_result(r, sizes_, config_.name);
  answered_[i] = true;
  held_.push_back(std::move(r));
  peak_held_ = std::max(peak_held_, held_.size());
}

void RoundAggregator::skip(int64_t client) {
  if (config_.name == "mean") return mean_.skip(client);
  answered_[index_of(client)] = true;
}

int64_t RoundAggregator::added() const {
  return config_.name == "mean" ? mean_.added() : static_cast<int64_t>(held_.size());
}

size_t RoundAggregator::peak_held() const { return config_.name == "mean" ? mean_.peak_held() : peak_held_; }

Params RoundAggregator::finish() {
  if (config_.name == "mean") return mean_.finish();
  Params out = aggregate_round(config_, held_);
  held_.clear();
  return out;
}

}  // namespace quartet::trainers::federated

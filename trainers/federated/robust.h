#pragma once

// Robust aggregation: ways to combine a round's client weights that a few corrupted
// updates cannot drag far, as they drag FedAvg's mean. Each is a pure function of the
// whole round; the result does not depend on the order of `results` (they are taken in
// ascending client order, ties broken by the lower client id). What they return goes on
// to the arm's strategy (Strategy::aggregate) in place of the mean, so fedavgm or fedadam
// compose with any of them. docs/federated.md.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trainers/federated/strategy.h"

namespace quartet::trainers::federated {

struct AggregatorConfig {
  std::string name = "mean";   // mean, median, trimmed_mean, krum
  double trim_fraction = 0.1;  // trimmed_mean: beta
  int64_t krum_byzantine = 1;  // krum: f, the Byzantine clients it tolerates
  int64_t krum_select = 1;     // krum: m, the clients averaged (1: Krum, more: multi-Krum)
};

std::vector<std::string> aggregator_names();

// trimmed_mean's k = floor(fraction n), forgiving the rounding of a product meant to be
// whole (0.3 * 10).
int64_t trimmed_per_side(double fraction, int64_t n);

// Why `config` cannot aggregate a round of `n` results (trimmed_mean trimming them all,
// krum with n <= 2f + 2 or m > n - f), naming the field; empty when it can.
std::string aggregator_misfit(const AggregatorConfig& config, int64_t n);

// Coordinate-wise median (Yin et al. 2018), unweighted: per element the middle value of
// the n clients', or the mean of the two middle ones when n is even.
// requires at least one result, every samples >= 1, weights shaped alike, no client twice
// (the same for trimmed_mean and krum); throws std::invalid_argument otherwise
Params coordinate_median(std::span<const ClientResult> results);

// Coordinate-wise trimmed mean (Yin et al. 2018), unweighted: per element the k =
// floor(trim_fraction n) smallest and k largest values are dropped and the rest averaged.
// requires 0 <= trim_fraction and n - 2k >= 1
Params trimmed_mean(std::span<const ClientResult> results, double trim_fraction);

// Multi-Krum (Blanchard et al. 2017; select = 1 is Krum): a client's score is the sum of
// the squared distances from its weights to its n - f - 2 nearest others'; the `select`
// clients of lowest score (ties: lower id) are averaged as FedAvg averages (by samples).
// requires n > 2f + 2 and 1 <= select <= n - f
Params krum(std::span<const ClientResult> results, int64_t byzantine, int64_t select);

// The arm's aggregator over a round: `config.name` applied to `results`.
Params aggregate_round(const AggregatorConfig& config, std::span<const ClientResult> results);

// A round's updates as they arrive, for the arm's aggregator: the mean adds each to an
// OrderedAverage (holding only those ahead of a slower client); the others need the whole
// round, so they hold every update until finish(). Refuses what OrderedAverage refuses.
class RoundAggregator {
 public:
  // clients: the round's, any order, no repeats; sizes: values per tensor
  RoundAggregator(AggregatorConfig config, std::vector<int64_t> clients, std::vector<size_t> sizes);
  void add(ClientResult&& result);
  void skip(int64_t client);
  int64_t added() const;
  size_t peak_held() const;
  // The aggregate of what was added; throws std::invalid_argument when nothing was, or
  // when the aggregator cannot take this many (aggregator_misfit).
  Params finish();

 private:
  size_t index_of(int64_t client) const;

  AggregatorConfig config_;
  OrderedAverage mean_;
  std::vector<int64_t> order_;        // the round's clients, ascending (not for the mean)
  std::vector<bool> answered_;        // per index in order_: added or skipped
  std::vector<size_t> sizes_;
  std::vector<ClientResult> held_;
  size_t peak_held_ = 0;
};

}  // namespace quartet::trainers::federated

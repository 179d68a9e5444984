#pragma once

// How a training set is split among K clients (federated, split learning). Indices refer
// to samples of the labels vector given (the training set). Every partitioner is seeded
// and platform independent, covers every sample exactly once, and never leaves a client
// empty. Each partition carries its per-client label histogram, recorded with the run.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/random.h"
#include "workloads/dataset.h"

namespace quartet::workloads {

struct Partition {
  std::vector<std::vector<int64_t>> clients;     // sample indices per client, ascending
  std::vector<std::vector<int64_t>> histograms;  // [client][class]: samples of that class
  int num_classes = 0;
  // What the histograms count: "class" (the samples' classes), or "scanner" for the
  // scanner partition, whose histograms are [client][scanner] and num_classes the scanners.
  std::string counts = "class";
  int64_t num_clients() const { return static_cast<int64_t>(clients.size()); }
};

struct PartitionSpec {
  std::string kind = "iid";  // "iid", "dirichlet", "shards" or "scanner"
  int64_t clients = 1;
  double alpha = 0.5;              // dirichlet: concentration; small is skewed
  int64_t shards_per_client = 2;   // shards
  uint64_t seed = 0;
};

std::vector<std::string> partition_kinds();

// Shuffles the samples and deals them out in contiguous runs; client sizes differ by at
// most one. requires 1 <= clients <= labels.size().
Partition partition_iid(const std::vector<int32_t>& labels, int num_classes, int64_t clients, uint64_t seed);

// Label skew after Hsu et al. 2019: for each class, proportions p ~ Dirichlet(alpha, ..., alpha)
// over the clients and that class's (shuffled) samples cut at the cumulative proportions.
// A draw that leaves some client empty is redrawn, up to max_draws times, then refused
// with an error saying to raise alpha or lower clients. requires alpha > 0.
Partition partition_dirichlet(const std::vector<int32_t>& labels, int num_classes, int64_t clients, double alpha,
                              uint64_t seed, int max_draws = 100);

// McMahan et al. 2017: samples sorted by label (ties in a seeded random order), cut into
// clients * shards_per_client shards of equal size (within one sample), and each client
// given shards_per_client shards at random; with 2 shards a client sees at most 2 labels
// unless a shard straddles a class boundary. requires clients * shards_per_client <= samples.
Partition partition_shards(const std::vector<int32_t>& labels, int num_classes, int64_t clients, uint64_t seed,
                           int64_t shards_per_client = 2);

// Feature skew by acquisition (hospitals with different scanners): scanner s goes whole to
// client s mod clients, so with clients == scanners each client holds one scanner.
// scanners[i] is sample i's scanner in [0, num_scanners); the histograms count scanners.
// requires 1 <= clients <= num_scanners, and every client left some sample (else
// std::invalid_argument saying which client and what to change).
Partition partition_scanner(const std::vector<int32_t>& scanners, int num_scanners, int64_t clients);

// Dispatches on spec.kind (the scanner kind needs the workload's scanners:
// workloads::make_partition(spec, workload)); unknown kinds throw std::invalid_argument listing the known ones.
Partition make_partition(const PartitionSpec& spec, const std::vector<int32_t>& labels, int num_classes);
Partition make_partition(const PartitionSpec& spec, const ImageDataset& data);

// Mean over clients of (largest class count / client size): 1/num_classes-ish for IID,
// near 1 for heavy label skew.
double mean_max_class_share(const Partition& p);

// Gamma(alpha, 1) by Marsaglia and Tsang 2000, with Gamma(alpha) = Gamma(alpha + 1) * U^(1/alpha)
// for alpha < 1. Uses only Generator's 64-bit stream, so draws match across platforms
// (up to libm's log/exp/sqrt/cos). requires alpha > 0.
double sample_gamma(engine::Generator& gen, double alpha);
// A point of the (k-1)-simplex from the symmetric Dirichlet(alpha); computed in log
// space so alpha as small as 0.001 gives proportions rather than 0/0. requires k >= 1.
std::vector<double> sample_dirichlet(engine::Generator& gen, int64_t k, double alpha);

}  // namespace quartet::workloads

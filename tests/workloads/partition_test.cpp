#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "workloads/partition.h"

namespace quartet::workloads {
namespace {

// 6000 samples, 600 per class, classes interleaved like a shuffled dataset.
std::vector<int32_t> balanced_labels(int64_t n = 6000, int classes = 10) {
  std::vector<int32_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % classes);
  return y;
}

void expect_covers_every_index_once(const Partition& p, int64_t n) {
  std::vector<int64_t> all;
  for (const auto& c : p.clients) all.insert(all.end(), c.begin(), c.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(static_cast<size_t>(n));
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected);
}

std::string error_of(auto f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Partition, IidCoversEveryIndexOnceInEvenParts) {
  const Partition p = partition_iid(balanced_labels(), 10, 7, 1);
  ASSERT_EQ(p.num_clients(), 7);
  expect_covers_every_index_once(p, 6000);
  for (const auto& c : p.clients) EXPECT_TRUE(c.size() == 857 || c.size() == 858) << c.size();
}

TEST(Partition, DirichletCoversEveryIndexOnceAndNoClientIsEmpty) {
  const Partition p = partition_dirichlet(balanced_labels(), 10, 20, 0.1, 1);
  expect_covers_every_index_once(p, 6000);
  for (const auto& c : p.clients) EXPECT_FALSE(c.empty());
}

TEST(Partition, ShardsCoverEveryIndexOnce) {
  const Partition p = partition_shards(balanced_labels(6007), 10, 30, 1);
  expect_covers_every_index_once(p, 6007);
}

TEST(Partition, HistogramsCountEachClientsLabels) {
  const auto labels = balanced_labels();
  const Partition p = partition_dirichlet(labels, 10, 5, 0.5, 3);
  for (int64_t k = 0; k < p.num_clients(); ++k) {
    std::vector<int64_t> h(10, 0);
    for (int64_t i : p.clients[k]) ++h[labels[i]];
    EXPECT_EQ(p.histograms[k], h);
  }
}

TEST(Partition, DirichletSmallAlphaIsMoreSkewedThanLargeAlpha) {
  const auto labels = balanced_labels();
  const double skewed = mean_max_class_share(partition_dirichlet(labels, 10, 10, 0.1, 1));
  const double mild = mean_max_class_share(partition_dirichlet(labels, 10, 10, 100.0, 1));
  const double iid = mean_max_class_share(partition_iid(labels, 10, 10, 1));
  EXPECT_GT(skewed, 0.5);
  EXPECT_LT(mild, 0.2);
  EXPECT_LT(iid, 0.15);
  EXPECT_GT(skewed, mild + 0.3);
}

TEST(Partition, ShardsGiveMostClientsAtMostTwoLabels) {
  const Partition p = partition_shards(balanced_labels(), 10, 100, 1);
  int at_most_two = 0;
  for (const auto& h : p.histograms)
    at_most_two += std::count_if(h.begin(), h.end(), [](int64_t c) { return c > 0; }) <= 2;
  EXPECT_GE(at_most_two, 90);
}

TEST(Partition, PartitionsAreDeterministicInTheSeed) {
  const auto labels = balanced_labels();
  for (const std::string kind : {"iid", "dirichlet", "shards"}) {
    PartitionSpec spec;
    spec.kind = kind;
    spec.clients = 8;
    spec.seed = 5;
    EXPECT_EQ(make_partition(spec, labels, 10).clients, make_partition(spec, labels, 10).clients) << kind;
    PartitionSpec other = spec;
    other.seed = 6;
    EXPECT_NE(make_partition(spec, labels, 10).clients, make_partition(other, labels, 10).clients) << kind;
  }
}

TEST(Partition, RefusesZeroClientsNamingTheField) {
  const std::string msg = error_of([] { partition_iid(balanced_labels(), 10, 0, 1); });
  EXPECT_NE(msg.find("partition clients: expected an integer in [1, 6000]"), std::string::npos) << msg;
}

TEST(Partition, RefusesMoreClientsThanSamples) {
  const std::string msg = error_of([] { partition_iid(balanced_labels(5), 10, 6, 1); });
  EXPECT_NE(msg.find("partition clients"), std::string::npos) << msg;
}

TEST(Partition, RefusesNonPositiveAlphaNamingTheField) {
  const std::string msg = error_of([] { partition_dirichlet(balanced_labels(), 10, 4, 0.0, 1); });
  EXPECT_NE(msg.find("partition alpha: expected a finite number > 0"), std::string::npos) << msg;
}

TEST(Partition, RefusesMoreShardsThanSamples) {
  const std::string msg = error_of([] { partition_shards(balanced_labels(10), 10, 6, 1); });
  EXPECT_NE(msg.find("6 clients x 2 shards need at least 12 samples"), std::string::npos) << msg;
}

TEST(Partition, RefusesAnUnknownKindListingTheKnownOnes) {
  PartitionSpec spec;
  spec.kind = "zipf";
  const std::string msg = error_of([&] { make_partition(spec, balanced_labels(), 10); });
  EXPECT_NE(msg.find("expected one of iid, dirichlet, shards, scanner, got \"zipf\""), std::string::npos) << msg;
}

TEST(Partition, DirichletThatCannotFillEveryClientFailsClearly) {
  // One class, ten samples, ten clients, tiny alpha: one client takes (nearly) all.
  const std::vector<int32_t> one_class(10, 0);
  const std::string msg = error_of([&] { partition_dirichlet(one_class, 10, 10, 0.001, 1, 20); });
  EXPECT_NE(msg.find("after 20 draws some client still got no samples"), std::string::npos) << msg;
}

TEST(Partition, GammaSamplesHaveMeanAndVarianceAlpha) {
  engine::Generator gen(11);
  for (double alpha : {0.2, 1.0, 3.5}) {
    const int n = 40000;
    double s = 0, s2 = 0;
    for (int i = 0; i < n; ++i) {
      const double x = sample_gamma(gen, alpha);
      s += x;
      s2 += x * x;
    }
    const double mean = s / n, var = s2 / n - mean * mean;
    EXPECT_NEAR(mean, alpha, 0.03 * std::max(1.0, alpha)) << alpha;
    EXPECT_NEAR(var, alpha, 0.08 * std::max(1.0, alpha)) << alpha;
  }
}

TEST(Partition, DirichletSamplesLieOnTheSimplexEvenForTinyAlpha) {
  engine::Generator gen(2);
  for (double alpha : {0.001, 0.5, 50.0}) {
    const auto p = sample_dirichlet(gen, 12, alpha);
    double total = 0;
    for (double v : p) {
      EXPECT_TRUE(std::isfinite(v) && v >= 0.0);
      total += v;
    }
    EXPECT_NEAR(total, 1.0, 1e-12);
  }
}

// Scanners 0..3 interleaved over 22 samples, as a phantom workload's volumes are.
std::vector<int32_t> interleaved_scanners(int64_t n = 22, int scanners = 4) {
  std::vector<int32_t> s;
  for (int64_t i = 0; i < n; ++i) s.push_back(static_cast<int32_t>(i % scanners));
  return s;
}

TEST(Partition, ScannerGivesEachClientOneWholeScanner) {
  const auto scanners = interleaved_scanners();
  const Partition p = partition_scanner(scanners, 4, 4);
  expect_covers_every_index_once(p, 22);
  EXPECT_EQ(p.counts, "scanner");
  EXPECT_EQ(p.num_classes, 4);
  for (int64_t k = 0; k < 4; ++k) {
    for (int64_t i : p.clients[k]) EXPECT_EQ(scanners[static_cast<size_t>(i)], k);
    for (int s = 0; s < 4; ++s)
      EXPECT_EQ(p.histograms[k][s], s == k ? static_cast<int64_t>(p.clients[k].size()) : 0) << k << " " << s;
  }
  EXPECT_DOUBLE_EQ(mean_max_class_share(p), 1.0);
}

TEST(Partition, ScannerDealsScannersRoundRobinToFewerClients) {
  const Partition p = partition_scanner(interleaved_scanners(), 4, 2);
  expect_covers_every_index_once(p, 22);
  EXPECT_EQ(p.histograms[0], (std::vector<int64_t>{6, 0, 5, 0}));
  EXPECT_EQ(p.histograms[1], (std::vector<int64_t>{0, 6, 0, 5}));
}

TEST(Partition, ScannerRefusesMoreClientsThanScannersAndEmptyClients) {
  EXPECT_NE(error_of([] { partition_scanner(interleaved_scanners(), 4, 5); })
                .find("the scanner partition gives each client whole scanners, so at most 4 clients"),
            std::string::npos);
  EXPECT_NE(error_of([] { partition_scanner({0, 1, 0, 1}, 3, 3); }).find("client 2 holds no training sample"),
            std::string::npos);
  PartitionSpec spec;
  spec.kind = "scanner";
  spec.clients = 2;
  EXPECT_NE(error_of([&] { make_partition(spec, balanced_labels(), 10); }).find("partition kind scanner"),
            std::string::npos);
}

}  // namespace
}  // namespace quartet::workloads

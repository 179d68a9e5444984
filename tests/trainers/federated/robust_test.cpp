#include "trainers/federated/robust.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "trainers/federated/client.h"

namespace quartet::trainers::federated {
namespace {

// One-weight clients (plus a second tensor where a test needs one), `samples` each.
std::vector<ClientResult> clients(const std::vector<float>& values, const std::vector<int64_t>& samples = {}) {
  std::vector<ClientResult> r;
  for (size_t i = 0; i < values.size(); ++i)
    r.push_back({.client = static_cast<int64_t>(i), .samples = samples.empty() ? 1 : samples[i],
                 .weights = {{values[i]}}});
  return r;
}

// Odd count: {1, 5, 3} sorted is {1, 3, 5}, the middle is 3; the sample counts (100 for
// the client of 5) do not weigh. Second tensor {-1, 7, 2} -> {-1, 2, 7}: 2.
TEST(FlRobust, MedianOfAnOddCountIsTheMiddleValue) {
  std::vector<ClientResult> r = {{.client = 0, .samples = 1, .weights = {{1.0f}, {-1.0f}}},
                                 {.client = 1, .samples = 100, .weights = {{5.0f}, {7.0f}}},
                                 {.client = 2, .samples = 1, .weights = {{3.0f}, {2.0f}}}};
  EXPECT_EQ(coordinate_median(r), (Params{{3.0f}, {2.0f}}));
}

// Even count: {1, 5, 3, 10} sorted is {1, 3, 5, 10}: (3 + 5) / 2 = 4.
TEST(FlRobust, MedianOfAnEvenCountIsTheMeanOfTheTwoMiddleValues) {
  EXPECT_EQ(coordinate_median(clients({1.0f, 5.0f, 3.0f, 10.0f})), (Params{{4.0f}}));
}

// n = 5, trim_fraction 0.2: k = floor(0.2 * 5) = 1 dropped at each end of
// {1, 2, 3, 4, 100}, the rest (2 + 3 + 4) / 3 = 3. trim_fraction 0 is the plain mean,
// 110 / 5 = 22; 0.5 would drop 2 at each end of 5 and leave 1: (3) = 3.
TEST(FlRobust, TrimmedMeanDropsTheFractionAtEachEnd) {
  const auto r = clients({100.0f, 2.0f, 1.0f, 4.0f, 3.0f});
  EXPECT_EQ(trimmed_mean(r, 0.2), (Params{{3.0f}}));
  EXPECT_EQ(trimmed_mean(r, 0.0), (Params{{22.0f}}));
  EXPECT_EQ(trimmed_mean(r, 0.5), (Params{{3.0f}}));
  // 4 clients at 0.5: 2 dropped at each end, none left.
  EXPECT_THROW(trimmed_mean(clients({1.0f, 2.0f, 3.0f, 4.0f}), 0.5), std::invalid_argument);
}

// Five clients at 0, 1, 3, 4 and 20 (the outlier), f = 1: each scores the squared
// distances to its n - f - 2 = 2 nearest others.
//   client 0 (0):  1, 9, 16, 400     -> 1 + 9 = 10
//   client 1 (1):  1, 4, 9, 361      -> 1 + 4 = 5
//   client 2 (3):  9, 4, 1, 289      -> 4 + 1 = 5
//   client 3 (4):  16, 9, 1, 256     -> 1 + 9 = 10
//   client 4 (20): 400, 361, 289, 256 -> 256 + 289 = 545
// Krum (m = 1): clients 1 and 2 tie at 5, the lower id wins: 1.
// Multi-Krum (m = 3): 1, 2 (5 each), then 0 and 3 tie at 10: 0. Averaged by samples
// (1, 1, 2 for clients 0, 1, 2): (0 * 1 + 1 * 1 + 3 * 2) / 4 = 1.75.
TEST(FlRobust, KrumPicksTheClientsNearestTheirNeighbours) {
  const auto r = clients({0.0f, 1.0f, 3.0f, 4.0f, 20.0f}, {1, 1, 2, 5, 5});
  EXPECT_EQ(krum(r, 1, 1), (Params{{1.0f}}));
  EXPECT_EQ(krum(r, 1, 3), (Params{{1.75f}}));
}

// Distances count every tensor: client 2 is near the others in the first tensor and far
// in the second. Points (0, 0), (1, 0), (0, 9), (1, 1), f = 0, 2 neighbours each:
//   client 0: to 1: 1, to 2: 81, to 3: 2    -> 1 + 2 = 3
//   client 1: 1, 82, 1                      -> 2
//   client 2: 81, 82, 65                    -> 146
//   client 3: 2, 1, 65                      -> 3
// Krum: client 1, (1, 0).
TEST(FlRobust, KrumDistancesSpanEveryTensor) {
  std::vector<ClientResult> r;
  const float xs[] = {0, 1, 0, 1}, ys[] = {0, 0, 9, 1};
  for (int c = 0; c < 4; ++c) r.push_back({.client = c, .samples = 1, .weights = {{xs[c]}, {ys[c]}}});
  EXPECT_EQ(krum(r, 0, 1), (Params{{1.0f}, {0.0f}}));
}

TEST(FlRobust, KrumRefusesTooFewClientsForItsF) {
  const auto four = clients({0.0f, 1.0f, 2.0f, 3.0f});
  EXPECT_THROW(krum(four, 1, 1), std::invalid_argument);  // n = 4 is not > 2f + 2 = 4
  EXPECT_NO_THROW(krum(four, 0, 1));
  EXPECT_THROW(krum(four, 0, 5), std::invalid_argument);  // m > n - f
  EXPECT_NE(aggregator_misfit({.name = "krum", .krum_byzantine = 1}, 4).find("krum_byzantine"), std::string::npos);
  EXPECT_EQ(aggregator_misfit({.name = "krum", .krum_byzantine = 1}, 5), "");
  EXPECT_NE(aggregator_misfit({.name = "trimmed_mean", .trim_fraction = 0.5}, 4).find("trim_fraction"),
            std::string::npos);
  EXPECT_EQ(aggregator_misfit({.name = "median"}, 1), "");
}

// The same results in any order give the same bits (values chosen to round differently
// when summed in another order).
TEST(FlRobust, AggregatorsDoNotDependOnArrivalOrder) {
  std::vector<ClientResult> r;
  for (int c = 0; c < 7; ++c)
    r.push_back({.client = 10 + c, .samples = 1 + c, .weights = {{0.1f * c + 1e-7f, 1.0f / (c + 3)}, {-0.3f * c}}});
  for (const std::string name : {"mean", "median", "trimmed_mean", "krum"}) {
    const AggregatorConfig config{.name = name, .trim_fraction = 0.3, .krum_byzantine = 1, .krum_select = 3};
    const Params a = aggregate_round(config, r);
    std::vector<ClientResult> shuffled = {r[3], r[6], r[0], r[5], r[1], r[4], r[2]};
    EXPECT_EQ(a, aggregate_round(config, shuffled)) << name;
  }
}

TEST(FlRobust, AggregatorsRefuseMismatchedShapesRepeatsAndNothing) {
  std::vector<ClientResult> r = {{.client = 0, .samples = 1, .weights = {{1.0f}}},
                                 {.client = 1, .samples = 1, .weights = {{1.0f, 2.0f}}}};
  EXPECT_THROW(coordinate_median(r), std::invalid_argument);
  r[1] = {.client = 0, .samples = 1, .weights = {{2.0f}}};
  EXPECT_THROW(coordinate_median(r), std::invalid_argument);
  EXPECT_THROW(trimmed_mean({}, 0.1), std::invalid_argument);
  EXPECT_THROW(aggregate_round({.name = "average"}, clients({1.0f})), std::invalid_argument);
}

// Fed as they arrive, a robust aggregator holds every update and gives the pure function's
// result; the mean streams them as OrderedAverage does.
TEST(FlRobust, RoundAggregatorHoldsTheRoundForRobustAggregators) {
  const auto r = clients({100.0f, 2.0f, 1.0f, 4.0f, 3.0f});
  RoundAggregator median({.name = "median"}, {4, 3, 2, 1, 0}, {1});
  for (int c : {4, 2, 0, 1}) median.add(ClientResult(r[c]));
  median.skip(3);
  EXPECT_EQ(median.added(), 4);
  EXPECT_EQ(median.peak_held(), 4u);
  EXPECT_THROW(median.skip(3), std::invalid_argument);
  EXPECT_THROW(median.add(ClientResult(r[0])), std::invalid_argument);
  EXPECT_THROW(median.add({.client = 9, .samples = 1, .weights = {{1.0f}}}), std::invalid_argument);
  // Client 3 (4) skipped: {3, 1, 100, 2} sorted {1, 2, 3, 100}: (2 + 3) / 2 = 2.5.
  EXPECT_EQ(median.finish(), (Params{{2.5f}}));
}

// Each attack moves the honest update d = w - global: sign_flip to global - s d, scale
// to global + s d. global 1, w 1.5 (d = 0.5), s = 4: sign_flip 1 - 2 = -1, scale 1 + 2 = 3.
TEST(FlRobust, ByzantineAttacksFlipOrScaleTheUpdate) {
  Params w = {{1.5f}};
  corrupt_update(w, {{1.0f}}, "sign_flip", 4.0);
  EXPECT_EQ(w, (Params{{-1.0f}}));
  w = {{1.5f}};
  corrupt_update(w, {{1.0f}}, "scale", 4.0);
  EXPECT_EQ(w, (Params{{3.0f}}));
  EXPECT_THROW(corrupt_update(w, {{1.0f}}, "noise", 4.0), std::invalid_argument);
  EXPECT_THROW(corrupt_update(w, {{1.0f, 2.0f}}, "scale", 4.0), std::invalid_argument);
}

}  // namespace
}  // namespace quartet::trainers::federated

#include "trainers/federated/strategy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "trainers/federated/compress.h"

namespace quartet::trainers::federated {
namespace {

// Hand values chosen so every weighted sum is exact in binary: 1*1 + 3*5 = 16, / 4 = 4.
TEST(FlStrategy, WeightedAverageIsExactOnHandValues) {
  std::vector<ClientResult> r = {
      {.client = 7, .samples = 1, .weights = {{1.0f, -2.0f}, {0.5f}}},
      {.client = 2, .samples = 3, .weights = {{5.0f, 2.0f}, {0.25f}}},
  };
  const Params avg = weighted_average(r);
  ASSERT_EQ(avg.size(), 2u);
  EXPECT_EQ(avg[0][0], 4.0f);    // (1*1 + 3*5) / 4
  EXPECT_EQ(avg[0][1], 1.0f);    // (1*-2 + 3*2) / 4
  EXPECT_EQ(avg[1][0], 0.3125f); // (0.5 + 0.75) / 4
}

TEST(FlStrategy, WeightedAverageDoesNotDependOnArrivalOrder) {
  std::vector<ClientResult> r;
  for (int c = 0; c < 5; ++c)
    r.push_back({.client = c, .samples = 3 + c, .weights = {{0.1f * c + 1e-7f, 1.0f / (c + 3)}}});
  const Params a = weighted_average(r);
  std::reverse(r.begin(), r.end());
  const Params b = weighted_average(r);
  EXPECT_EQ(a, b);
}

// Updates fed as they arrive: each waits only for the clients before it, and the mean is
// the whole round's weighted_average bit for bit.
TEST(FlStrategy, OrderedAverageHoldsOnlyUpdatesAheadOfASlowerClient) {
  std::vector<ClientResult> r;
  for (int c = 0; c < 6; ++c)
    r.push_back({.client = 10 + c, .samples = 2 + c, .weights = {{0.1f * c + 1e-7f, 1.0f / (c + 3)}, {-0.3f * c}}});
  OrderedAverage average({15, 11, 10, 12, 13, 14}, {2, 1});
  average.add(r[2]);  // client 12 waits for 10 and 11
  average.add(r[5]);  // 15 waits too
  EXPECT_EQ(average.held(), 2u);
  average.add(r[0]);  // 10 is added at once; 11 still missing
  EXPECT_EQ(average.held(), 2u);
  average.skip(11);   // 11 failed: 12 is added, 13 is now awaited
  EXPECT_EQ(average.held(), 1u);
  average.add(r[3]);  // 13, then 14 is awaited; 15 stays
  EXPECT_EQ(average.held(), 1u);
  EXPECT_EQ(average.added(), 3);
  EXPECT_EQ(average.peak_held(), 2u);
  // 14 never answers: finish counts it as skipped and adds 15.
  const Params mean = average.finish();
  EXPECT_EQ(average.added(), 4);
  EXPECT_EQ(mean, weighted_average(std::vector<ClientResult>{r[5], r[3], r[0], r[2]}));
}

TEST(FlStrategy, OrderedAverageRefusesStrangersRepeatsAndAnEmptyRound) {
  OrderedAverage average({0, 1}, {1});
  EXPECT_THROW(average.add({.client = 2, .samples = 1, .weights = {{1.0f}}}), std::invalid_argument);
  EXPECT_THROW(average.add({.client = 0, .samples = 1, .weights = {{1.0f}, {2.0f}}}), std::invalid_argument);
  average.add({.client = 0, .samples = 1, .weights = {{1.0f}}});
  EXPECT_THROW(average.add({.client = 0, .samples = 1, .weights = {{1.0f}}}), std::invalid_argument);
  EXPECT_THROW(average.skip(0), std::invalid_argument);
  EXPECT_THROW(OrderedAverage({3, 3}, {1}), std::invalid_argument);
  OrderedAverage nobody({4}, {1});
  nobody.skip(4);
  EXPECT_THROW(nobody.finish(), std::invalid_argument);
}

TEST(FlStrategy, WeightedAverageRefusesMismatchedShapesAndZeroSamples) {
  std::vector<ClientResult> r = {{.client = 0, .samples = 1, .weights = {{1.0f}}},
                                 {.client = 1, .samples = 1, .weights = {{1.0f, 2.0f}}}};
  EXPECT_THROW(weighted_average(r), std::invalid_argument);
  r[1] = {.client = 1, .samples = 0, .weights = {{1.0f}}};
  EXPECT_THROW(weighted_average(r), std::invalid_argument);
  EXPECT_THROW(weighted_average({}), std::invalid_argument);
}

// beta = 0, server_lr = 1 is plain FedAvg; with beta the velocity carries over.
TEST(FlStrategy, ServerMomentumStepFollowsHsuEtAl) {
  Params global = {{1.0f}}, velocity;
  server_momentum_step(global, {{0.5f}}, velocity, 0.5, 1.0);  // d = 0.5, v = 0.5, g = 0.5
  EXPECT_FLOAT_EQ(global[0][0], 0.5f);
  EXPECT_FLOAT_EQ(velocity[0][0], 0.5f);
  server_momentum_step(global, {{0.5f}}, velocity, 0.5, 1.0);  // d = 0, v = 0.25, g = 0.25
  EXPECT_FLOAT_EQ(global[0][0], 0.25f);
  EXPECT_FLOAT_EQ(velocity[0][0], 0.25f);
}

TEST(FlStrategy, FedAvgMWithoutMomentumEqualsFedAvg) {
  std::vector<ClientResult> r = {{.client = 0, .samples = 2, .weights = {{1.0f, 3.0f}}},
                                 {.client = 1, .samples = 2, .weights = {{3.0f, 5.0f}}}};
  auto m = make_strategy({.name = "fedavgm", .server_momentum = 0.0, .server_lr = 1.0});
  auto a = make_strategy({.name = "fedavg"});
  EXPECT_EQ(m->aggregate({{0.0f, 0.0f}}, weighted_average(r), 1), a->aggregate({{0.0f, 0.0f}}, weighted_average(r), 1));
  EXPECT_FALSE(m->state().empty());
}

// FedAdam by hand (beta1 = 0.5, beta2 = 0.75, eta = 1, tau = 0.5), one weight:
// round 1: g = 1, average 2: d = 1, m = 0.5, v = 0.25 * 1 = 0.25, g = 1 + 0.5 / (0.5 + 0.5) = 1.5
// round 2: average 1.5: d = 0, m = 0.25, v = 0.75 * 0.25 = 0.1875,
//          g = 1.5 + 0.25 / (sqrt(0.1875) + 0.5) = 1.5 + 0.25 / 0.9330127 = 1.7679492
TEST(FlStrategy, FedAdamTwoRoundsByHand) {
  Params global = {{1.0f}}, m, v;
  fedopt_step(global, {{2.0f}}, m, v, Adaptivity::adam, 1.0, 0.5, 0.75, 0.5);
  EXPECT_FLOAT_EQ(m[0][0], 0.5f);
  EXPECT_FLOAT_EQ(v[0][0], 0.25f);
  EXPECT_FLOAT_EQ(global[0][0], 1.5f);
  fedopt_step(global, {{1.5f}}, m, v, Adaptivity::adam, 1.0, 0.5, 0.75, 0.5);
  EXPECT_FLOAT_EQ(m[0][0], 0.25f);
  EXPECT_FLOAT_EQ(v[0][0], 0.1875f);
  EXPECT_NEAR(global[0][0], 1.7679492f, 1e-6);
}

// FedAdagrad by hand (beta1 = 0.5, eta = 1, tau = 0.5; beta2 takes no part), one weight:
// round 1: g = 0, average 2: d = 2, m = 1, v = 4, g = 1 / (2 + 0.5) = 0.4
// round 2: average 1.4: d = 1, m = 0.5 + 0.5 = 1, v = 4 + 1 = 5,
//          g = 0.4 + 1 / (sqrt(5) + 0.5) = 0.4 + 0.3654880 = 0.7654880
TEST(FlStrategy, FedAdagradTwoRoundsByHand) {
  Params global = {{0.0f}}, m, v;
  fedopt_step(global, {{2.0f}}, m, v, Adaptivity::adagrad, 1.0, 0.5, 0.123, 0.5);
  EXPECT_FLOAT_EQ(m[0][0], 1.0f);
  EXPECT_FLOAT_EQ(v[0][0], 4.0f);
  EXPECT_FLOAT_EQ(global[0][0], 0.4f);
  fedopt_step(global, {{1.4f}}, m, v, Adaptivity::adagrad, 1.0, 0.5, 0.123, 0.5);
  EXPECT_NEAR(m[0][0], 1.0f, 1e-6);
  EXPECT_NEAR(v[0][0], 5.0f, 1e-5);
  EXPECT_NEAR(global[0][0], 0.7654880f, 1e-6);
}

// FedYogi by hand (beta1 = 0, beta2 = 0.5, eta = 1, tau = 0), one weight; v grows while
// d^2 > v and shrinks (unlike Adam, by (1 - beta2) d^2, not towards it) once d^2 < v:
// round 1: g = 0, average 2: d = 2, m = 2, v = 0 - 0.5 * 4 * sign(0 - 4) = 2,
//          g = 2 / sqrt(2) = 1.4142136
// round 2: average g + 1: d = 1, m = 1, v = 2 - 0.5 * 1 * sign(2 - 1) = 1.5,
//          g = 1.4142136 + 1 / sqrt(1.5) = 1.4142136 + 0.8164966 = 2.2307102
TEST(FlStrategy, FedYogiTwoRoundsByHand) {
  Params global = {{0.0f}}, m, v;
  fedopt_step(global, {{2.0f}}, m, v, Adaptivity::yogi, 1.0, 0.0, 0.5, 0.0);
  EXPECT_FLOAT_EQ(m[0][0], 2.0f);
  EXPECT_FLOAT_EQ(v[0][0], 2.0f);
  EXPECT_FLOAT_EQ(global[0][0], 1.4142136f);
  fedopt_step(global, {{global[0][0] + 1.0f}}, m, v, Adaptivity::yogi, 1.0, 0.0, 0.5, 0.0);
  EXPECT_NEAR(m[0][0], 1.0f, 1e-6);
  EXPECT_FLOAT_EQ(v[0][0], 1.5f);
  EXPECT_NEAR(global[0][0], 2.2307102f, 1e-6);
}

// FedAdam as Flower's FedAdam.aggregate_fit computes it (flwr 1.42, with its bias
// correction eta sqrt(1 - beta2^(r+1)) / (1 - beta1^(r+1)) in round r), three rounds of
// one client, eta 0.1 and tau 1e-3. The expected weights are Flower's own output, from
// this script run against `pip install flwr==1.42.0`:
//   import numpy as np
//   from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
//   from flwr.server.strategy import FedAdam
//   def run(beta_1, beta_2):
//       w0 = [np.array([1.0, -2.0, 0.5], dtype=np.float32)]
//       s = FedAdam(initial_parameters=ndarrays_to_parameters(w0), eta=0.1, tau=1e-3,
//                   beta_1=beta_1, beta_2=beta_2)
//       for r, avg in enumerate([[1.5, -1.0, 0.25], [2.0, -1.5, 0.0], [1.0, 0.5, 1.0]], start=1):
//           res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([np.array(avg, dtype=np.float32)]), 1, {})
//           params, _ = s.aggregate_fit(r, [(None, res)], [])
//           print(beta_1, beta_2, r, ", ".join(f"{x:.9g}" for x in parameters_to_ndarrays(params)[0]))
//   run(0.9, 0.99)
//   run(0.5, 0.9)
TEST(FlStrategy, FedAdamMatchesFlowersFedAdam) {
  const std::vector<std::vector<float>> averages = {{1.5f, -1.0f, 0.25f}, {2.0f, -1.5f, 0.0f}, {1.0f, 0.5f, 1.0f}};
  struct Case {
    double beta1, beta2;
    std::vector<std::vector<float>> flower;  // the weights after rounds 1, 2 and 3
  };
  const std::vector<Case> cases = {
      {0.9, 0.99, {{1.07279018f, -1.92648913f, 0.428609636f}, {1.15524042f, -1.84927753f, 0.346392816f},
                   {1.21381729f, -1.77044934f, 0.350945046f}}},
      {0.5, 0.9, {{1.09131612f, -1.90839601f, 0.409254197f}, {1.19732278f, -1.82591476f, 0.30371108f},
                  {1.23527999f, -1.71710594f, 0.354757001f}}},
  };
  for (const Case& c : cases) {
    auto adam = make_strategy({.name = "fedadam", .server_lr = 0.1, .beta1 = c.beta1, .beta2 = c.beta2, .tau = 1e-3});
    Params g = {{1.0f, -2.0f, 0.5f}};
    for (int64_t round = 1; round <= 3; ++round) {
      g = adam->aggregate(g, {averages[static_cast<size_t>(round - 1)]}, round);
      for (size_t k = 0; k < 3; ++k)
        EXPECT_NEAR(g[0][k], c.flower[static_cast<size_t>(round - 1)][k], 1e-6)
            << "beta " << c.beta1 << "/" << c.beta2 << ", round " << round << ", weight " << k;
    }
  }
}

// The correction is Kingma and Ba's alpha_t with t = round + 1, as Flower counts: at
// round 1 with beta 0.9/0.99 the step is sqrt(1 - 0.99^2) / (1 - 0.9^2) = 0.7425 of the
// uncorrected one, and it tends to 1.
TEST(FlStrategy, FedAdamStepScaleIsFlowersBiasCorrection) {
  EXPECT_NEAR(fedadam_step_scale(0.9, 0.99, 1), std::sqrt(1 - 0.99 * 0.99) / (1 - 0.9 * 0.9), 1e-15);
  EXPECT_NEAR(fedadam_step_scale(0.9, 0.99, 1), 0.742459, 1e-6);
  EXPECT_NEAR(fedadam_step_scale(0.5, 0.9, 1), std::sqrt(1 - 0.81) / 0.75, 1e-15);
  EXPECT_NEAR(fedadam_step_scale(0.9, 0.99, 100000), 1.0, 1e-9);
}

// The strategy object keeps m and v between rounds and hands them over whole: a strategy
// restored from another's state() continues bit for bit.
TEST(FlStrategy, FedOptStateRoundTripsForCheckpoints) {
  for (const std::string name : {"fedadagrad", "fedadam", "fedyogi"}) {
    StrategyConfig c{.name = name, .server_lr = 0.1};
    auto a = make_strategy(c);
    EXPECT_TRUE(a->state().empty());
    Params g = {{0.0f, 1.0f}, {2.0f}};
    g = a->aggregate(g, {{0.5f, 0.75f}, {2.5f}}, 1);
    ASSERT_EQ(a->state().size(), 4u) << name;  // m and v, two tensors each
    auto b = make_strategy(c);
    b->load_state(a->state());
    const Params next = {{0.25f, 1.5f}, {1.0f}};
    EXPECT_EQ(a->aggregate(g, next, 2), b->aggregate(g, next, 2)) << name;
    EXPECT_THROW(b->load_state({{1.0f}}), std::invalid_argument);
  }
}

TEST(FlStrategy, FedProxAddsMuTimesDistanceToTheGradient) {
  std::vector<float> g = {1.0f, 1.0f};
  add_proximal_gradient(g, std::vector<float>{2.0f, 0.0f}, std::vector<float>{1.0f, 1.0f}, 0.5f);
  EXPECT_FLOAT_EQ(g[0], 1.5f);
  EXPECT_FLOAT_EQ(g[1], 0.5f);
  EXPECT_DOUBLE_EQ(make_strategy({.name = "fedprox", .mu = 0.1})->proximal_mu(), 0.1);
  EXPECT_DOUBLE_EQ(make_strategy({.name = "fedavg"})->proximal_mu(), 0.0);
  EXPECT_THROW(make_strategy({.name = "scaffold"}), std::invalid_argument);
}

TEST(FlStrategy, ClientSamplingIsSeededDistinctAndSized) {
  EXPECT_EQ(clients_per_round(10, 0.5), 5);
  EXPECT_EQ(clients_per_round(10, 0.01), 1);
  EXPECT_EQ(clients_per_round(10, 0.1, 3), 3);
  EXPECT_EQ(clients_per_round(3, 1.0, 1), 3);
  const auto a = sample_clients(100, 10, 42, 3);
  EXPECT_EQ(a, sample_clients(100, 10, 42, 3));
  EXPECT_NE(a, sample_clients(100, 10, 42, 4));
  EXPECT_NE(a, sample_clients(100, 10, 43, 3));
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), 10u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  for (int64_t c : a) EXPECT_TRUE(c >= 0 && c < 100);
  EXPECT_EQ(sample_clients(4, 4, 1, 1), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_THROW(sample_clients(4, 5, 1, 1), std::invalid_argument);
}

// Over many rounds every client is asked about equally often.
TEST(FlStrategy, ClientSamplingIsRoughlyUniform) {
  std::vector<int> hits(20, 0);
  for (int r = 1; r <= 2000; ++r)
    for (int64_t c : sample_clients(20, 5, 7, r)) ++hits[c];
  for (int h : hits) EXPECT_NEAR(h, 500, 80);
}

TEST(FlCompress, HalfConversionRoundsToNearestEven) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);            // halfway to 65536: rounds to inf
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // exactly half of it: to even (0)
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie: to even
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  // Every half survives half -> float -> half.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs
    ASSERT_EQ(float_to_half(half_to_float(static_cast<uint16_t>(h))), h) << h;
  }
}

TEST(FlCompress, Fp16RoundTripIsWithinHalfPrecision) {
  std::vector<float> v;
  for (int i = 0; i < 1000; ++i) v.push_back(std::sin(0.37f * i) * 0.01f);
  const auto bytes = encode_fp16(v);
  EXPECT_EQ(bytes.size(), 2 * v.size());
  const auto back = decode_fp16(bytes, v.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(back[i], v[i], std::abs(v[i]) * 1e-3 + 1e-7);
  EXPECT_THROW(decode_fp16(bytes, v.size() + 1), std::invalid_argument);
}

TEST(FlCompress, TopKSendsTheLargestAndKeepsTheRestAsResidual) {
  std::vector<float> residual;
  const std::vector<float> d = {0.1f, -5.0f, 0.2f, 3.0f};
  const auto bytes = encode_topk(d, 0.5, residual);  // k = 2
  EXPECT_EQ(bytes.size(), 16u + 8u * 2u);
  EXPECT_EQ(decode_topk(bytes, 4), (std::vector<float>{0.0f, -5.0f, 0.0f, 3.0f}));
  EXPECT_EQ(residual, (std::vector<float>{0.1f, 0.0f, 0.2f, 0.0f}));
  // Error feedback: the unsent values add to the next update.
  const auto next = decode_topk(encode_topk(std::vector<float>{0.1f, 0.0f, 0.0f, 0.0f}, 0.25, residual), 4);
  EXPECT_EQ(next, (std::vector<float>{0.2f, 0.0f, 0.0f, 0.0f}));
  EXPECT_EQ(residual, (std::vector<float>{0.0f, 0.0f, 0.2f, 0.0f}));
}

// Nothing is lost: over rounds, what was sent plus what is left equals what was given.
TEST(FlCompress, TopKErrorFeedbackConservesTheSum) {
  std::vector<float> residual, sent(50, 0.0f), given(50, 0.0f);
  for (int r = 0; r < 20; ++r) {
    std::vector<float> d(50);
    for (int i = 0; i < 50; ++i) d[i] = std::cos(0.7f * i + r) * 0.5f;
    for (int i = 0; i < 50; ++i) given[i] += d[i];
    const auto dense = decode_topk(encode_topk(d, 0.1, residual), 50);
    for (int i = 0; i < 50; ++i) sent[i] += dense[i];
  }
  for (int i = 0; i < 50; ++i) EXPECT_NEAR(sent[i] + residual[i], given[i], 1e-5);
}

TEST(FlCompress, TopKRefusesMalformedBytes) {
  std::vector<float> residual;
  auto bytes = encode_topk(std::vector<float>{1.0f, 2.0f, 3.0f}, 0.5, residual);
  EXPECT_THROW(decode_topk(bytes, 4), std::invalid_argument);
  bytes.pop_back();
  EXPECT_THROW(decode_topk(bytes, 3), std::invalid_argument);
  auto bad = encode_topk(std::vector<float>{1.0f, 2.0f, 3.0f}, 0.5, residual);
  bad[16] = std::byte{9};  // first index out of range
  EXPECT_THROW(decode_topk(bad, 3), std::invalid_argument);
}

}  // namespace
}  // namespace quartet::trainers::federated

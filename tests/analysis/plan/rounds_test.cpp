#include "analysis/plan/rounds.h"

#include <gtest/gtest.h>

#include "tests/analysis/plan/toy_cluster.h"

namespace quartet::analysis::plan {
namespace {

TEST(Rounds, SplitStepIsBothHalvesAndTwoMessages) {
  const ModelShape m = model_shape("cnn");
  PlanArm a;
  a.name = a.regime = "split";
  a.batch = 32;
  a.clients = 4;
  a.cuts = {"conv2"};
  a.link_bandwidth_bytes_per_s = 125e6;  // 1 Gbit/s
  a.link_latency_s = 100e-6;
  const Prediction p = predict(m, a, compute_bound());
  const double compute = train_flops(m) * 32 / 0.5e12;
  const double comm = 2 * 100e-6 + 2 * 64 * 7 * 7 * 32 * 4.0 / 125e6;  // conv2's pooled output, up and down
  EXPECT_NEAR(p.step_seconds, compute + comm, 1e-9);
  EXPECT_NEAR(p.comm_seconds, comm, 1e-12);
}

// On a CPU node, a process runs on the threads the arm gives it when they are fewer than
// its share of the cores: split's client and server on one thread each take a step twice
// as long in compute as on the node's two cores.
TEST(Rounds, SplitOnACpuNodeRunsOnTheArmsThreads) {
  const ModelShape m = model_shape("cnn");
  ClusterProfile c = compute_bound(2);
  c.device.kind = "cpu";
  PlanArm a;
  a.name = a.regime = "split";
  a.batch = 32;
  a.clients = 4;
  a.cuts = {"conv2"};
  const Prediction both = predict(m, a, c);
  a.threads = 1;
  const Prediction one = predict(m, a, c);
  EXPECT_NEAR(one.compute_seconds, 2 * both.compute_seconds, 1e-12);
  EXPECT_NEAR(one.comm_seconds, both.comm_seconds, 1e-15);
}

Population phones() {
  Population p;
  p.clients = 100000;
  p.flops = {"lognormal", 5e9, 0.7};
  p.down_bytes_per_s = {"lognormal", 30e6 / 8, 0.8};
  p.up_bytes_per_s = {"lognormal", 8e6 / 8, 0.8};
  p.latency_s = {"uniform", 0.03, 0.12};
  p.dropout = 0.1;
  return p;
}

TEST(Rounds, DrawsAreSeededAndDropAtTheRate) {
  const std::vector<ClientDraw> a = draw_clients(phones(), 100000, 7), b = draw_clients(phones(), 100000, 7);
  int64_t dropped = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].flops_per_s, b[i].flops_per_s);
    dropped += a[i].drops;
  }
  EXPECT_NEAR(static_cast<double>(dropped) / 100000, 0.1, 0.005);
  EXPECT_NE(draw_clients(phones(), 10, 8)[0].flops_per_s, a[0].flops_per_s);
}

// Rounds as a run dealt them (unequal clients, two pools): each round waits for the pool
// with the most samples to train, each client's model down and up on the arm's link.
TEST(Rounds, DealtRoundsWaitForTheBusiestPool) {
  ClusterProfile c = compute_bound(2);
  c.device.kind = "cpu";
  PlanArm a;
  a.name = a.regime = "federated";
  a.batch = 32;
  a.clients = 10;
  a.fraction = 0.4;
  a.link_bandwidth_bytes_per_s = 125e6;
  a.link_latency_s = 1e-3;
  a.client_rounds = {{{100, 300}, {50}}, {{200}, {600, 10}}};
  const ModelShape m = model_shape("cnn");
  const Prediction p = predict(m, a, c);
  const double per_sample = train_flops(m) / 0.5e12;  // a pool on one of the node's two devices
  const double msgs = 2 * (1e-3 + parameter_count(m) * 4 / 125e6);
  const double r1 = 400 * per_sample + 2 * msgs, r2 = 610 * per_sample + 2 * msgs;
  const double aggregate = 3 * parameter_count(m) * 4 / (1e18 * 2);
  // (Elementwise layers take their bytes over the toy's vast memory bandwidth: ~1e-9 s.)
  EXPECT_NEAR(p.step_seconds / ((r1 + r2) / 2 + aggregate), 1.0, 1e-6);
  EXPECT_NEAR(p.samples_per_second / ((450.0 + 810.0) / (r1 + r2 + 2 * aggregate)), 1.0, 1e-6);
}

// A client trains whole batches of its data, dropping the last partial one: 60 samples at
// batch 32 are one step, as 32 are; fewer than a batch are one step of what it holds.
TEST(Rounds, AClientTrainsWholeBatches) {
  ClusterProfile c = compute_bound(2);
  c.device.kind = "cpu";
  PlanArm a;
  a.name = a.regime = "federated";
  a.batch = 32;
  a.clients = 4;
  const ModelShape m = model_shape("cnn");
  a.client_samples = 60;
  const Prediction sixty = predict(m, a, c);
  a.client_samples = 32;
  const Prediction thirty_two = predict(m, a, c);
  EXPECT_DOUBLE_EQ(sixty.step_seconds, thirty_two.step_seconds);
  EXPECT_DOUBLE_EQ(sixty.samples_per_second, thirty_two.samples_per_second);
  a.client_samples = 64;
  EXPECT_GT(predict(m, a, c).step_seconds, sixty.step_seconds);
  a.client_samples = 20;
  EXPECT_LT(predict(m, a, c).step_seconds, thirty_two.step_seconds);
}

TEST(Rounds, AHundredThousandClientsWaitForTheSlowest) {
  ClusterProfile c = compute_bound();
  c.population = phones();
  PlanArm a;
  a.name = a.regime = "federated";
  a.batch = 32;
  a.clients = 100000;
  a.fraction = 1.0;
  a.client_samples = 600;
  const ModelShape m = model_shape("cnn");
  const Prediction all = predict(m, a, c);
  a.fraction = 0.001;  // 100 clients: the slowest of fewer is faster
  const Prediction few = predict(m, a, c);
  EXPECT_GT(all.step_seconds, few.step_seconds);
  // The slowest of 90,000 is far slower than the median client.
  const double median = train_flops(m) * 600 / 5e9 + parameter_count(m) * 4 * (8 / 30e6 + 8 / 8e6);
  EXPECT_GT(all.step_seconds, 3 * median);
}

}  // namespace
}  // namespace quartet::analysis::plan

// The report's projection (docs/results.md): time on a link = compute on the critical path +
// Σ over its messages (bytes / bandwidth + latency), read per regime from real records.

#include "analysis/projection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tests/run_fixture.h"
#include "trainers/regime.h"
#include "transport/link.h"

namespace quartet::analysis {
namespace {

using test_util::fixture_run;
using trainers::CriticalPath;
using trainers::PathLeg;
using trainers::PathStage;

const ArmResults& arm(const RunResults& run, const std::string& name) {
  for (const ArmResults& a : run.arms)
    if (a.name == name) return a;
  throw std::runtime_error("no arm " + name);
}

bool near(double a, double b, double rel = 1e-9) { return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b)); }

TEST(Projection, PathSecondsIsComputePlusBytesOverBandwidthPlusLatencyPerMessage) {
  // Two stages: one leg; then two legs side by side, the slower one counting.
  const std::vector<PathStage> stages = {PathStage{{PathLeg{1.0, 1e9 / 8, 10}}},
                                         PathStage{{PathLeg{2.0, 0, 0}, PathLeg{0.5, 1e9 / 8, 2}}}};
  double comm = 0.0;
  // 1 Gbit/s, 1 ms: stage 1 = 1 + 1 + 0.01; stage 2 = max(2, 0.5 + 1 + 0.002) = 2.
  EXPECT_TRUE(near(path_seconds(stages, 1e9, 1e-3, &comm), 4.01));
  EXPECT_TRUE(near(comm, 1.01));
  // At 100 Mbit/s the second stage's networked leg is the slower one: 0.5 + 10 + 0.002.
  EXPECT_TRUE(near(path_seconds(stages, 1e8, 1e-3), 1.0 + 10.0 + 0.01 + 10.502));
}

TEST(Projection, LinksAreTheNetworkPresetsFastestFirst) {
  const std::vector<std::string> links = projection_links();
  EXPECT_EQ(links.front(), "nvlink");
  EXPECT_EQ(links.back(), "lte");
  EXPECT_EQ(std::find(links.begin(), links.end(), "loopback"), links.end());
  for (size_t i = 1; i < links.size(); ++i)
    EXPECT_GE(transport::link_profile(links[i - 1]).bandwidth_bits_per_s,
              transport::link_profile(links[i]).bandwidth_bits_per_s);
}

// An arm cut short (interrupted or failed) is projected from what it ran, and says so.
TEST(Projection, AnArmCutShortIsMarkedPartial) {
  RunResults run = load_run(fixture_run());
  ArmResults single = arm(run, "single");
  EXPECT_EQ(project_arm(single).arm, "single");
  for (const char* status : {"interrupted", "failed"}) {
    single.status = status;
    EXPECT_TRUE(is_partial(single)) << status;
    EXPECT_EQ(project_arm(single).arm, "single (partial)") << status;
  }
  single.label = "B: single";
  EXPECT_EQ(shown_label(single), "B: single (partial)");
  for (const char* status : {"finished", "degraded", "diverged", "running"}) {
    single.status = status;
    EXPECT_FALSE(is_partial(single)) << status;
  }
}

TEST(Projection, OneProcessArmsTakeTheSameTimeOnEveryLink) {
  const RunResults run = load_run(fixture_run());
  for (const char* name : {"single", "accum-2"}) {
    const ArmProjection p = project_arm(arm(run, name));
    EXPECT_TRUE(p.unavailable.empty());
    EXPECT_EQ(p.bytes_per_epoch, 0.0);
    for (const LinkEstimate& e : p.links) EXPECT_TRUE(near(e.seconds_per_epoch, p.compute_seconds_per_epoch));
  }
}

TEST(Projection, DataParallelPaysItsRanksRingTrafficPerEpoch) {
  const RunResults run = load_run(fixture_run());
  const ArmResults& ddp = arm(run, "ddp-2");
  const ArmProjection p = project_arm(ddp);
  // Each rank's bytes are the ring's: half the arm's sent bytes per rank, over the epochs.
  const double sent = ddp.summary["bytes"]["sent"].get<double>();
  EXPECT_TRUE(near(p.bytes_per_epoch, sent / 2 / p.epochs, 0.01));
  EXPECT_GT(p.messages_per_epoch, 0);
  const LinkEstimate& lte = p.links.back();
  const auto profile = transport::link_profile("lte");
  EXPECT_TRUE(near(lte.comm_seconds_per_epoch,
               p.bytes_per_epoch * 8 / profile.bandwidth_bits_per_s + p.messages_per_epoch * profile.latency_s, 0.01));
  // Slower links never make an arm faster.
  for (size_t i = 1; i < p.links.size(); ++i) EXPECT_GE(p.links[i].seconds_per_epoch, p.links[i - 1].seconds_per_epoch);
}

// Hierarchical collectives: a rank's bytes within its host go on the arm's intra_link,
// its bytes between hosts (a leader's) on the projected link.
TEST(Projection, HierarchicalDataParallelPricesIntraAndInterHostBytesApart) {
  auto step = [](double inter_bytes, double inter_messages) {
    return nlohmann::json{{"type", "step"},
                          {"compute", {{"forward", 0.5}, {"backward", 0.5}}},
                          {"bytes_sent", 0},
                          {"messages", 0},
                          {"comm",
                           {{"intra_link", "10gbe"},
                            {"levels",
                             {{"intra", {{"bytes", 1e9 / 8}, {"messages", 3}, {"seconds", 0.1}}},
                              {"inter", {{"bytes", inter_bytes}, {"messages", inter_messages}, {"seconds", 0.1}}}}}}}};
  };
  const std::vector<trainers::RoleRecords> roles = {{"rank0", {step(1e9 / 8, 2), step(1e9 / 8, 2)}},
                                                    {"rank1", {step(0, 0), step(0, 0)}}};
  const CriticalPath path = critical_path("data_parallel", roles);
  ASSERT_EQ(path.stages.size(), 1u);
  ASSERT_EQ(path.stages[0].parallel.size(), 2u);
  const PathLeg& leader = path.stages[0].parallel[0];
  EXPECT_EQ(leader.bytes, 2e9 / 8);
  EXPECT_EQ(leader.messages, 4);
  EXPECT_EQ(leader.intra_bytes, 2e9 / 8);
  EXPECT_EQ(leader.intra_messages, 6);
  EXPECT_EQ(leader.intra_link, "10gbe");
  EXPECT_EQ(path.stages[0].parallel[1].bytes, 0.0);
  // On 1 Gbit/s, 1 ms: the leader's compute 2 s + inter 2 s + 4 ms + intra at 10 Gbit/s
  // 0.2 s + 6 x 50 us.
  const auto ten = transport::link_profile("10gbe");
  EXPECT_TRUE(near(path_seconds(path.stages, 1e9, 1e-3), 2.0 + 2.0 + 0.004 + 2e9 / ten.bandwidth_bits_per_s +
                                                             6 * ten.latency_s));
}

TEST(Projection, FederatedAndSplitAreProjectedOntoTheLinkTheyRanOnToo) {
  const RunResults run = load_run(fixture_run());
  for (const char* name : {"fedavg-4", "split-2"}) {
    const ArmProjection p = project_arm(arm(run, name));
    ASSERT_TRUE(p.unavailable.empty()) << name;
    ASSERT_TRUE(p.on_measured_link.has_value());
    EXPECT_EQ(p.on_measured_link->link, arm(run, name).link);
    EXPECT_GT(p.measured_seconds_per_epoch, 0);
    EXPECT_GT(p.bytes_per_epoch, 0);
    EXPECT_EQ(p.path_model.find("everything in turn"), std::string::npos) << p.path_model;
  }
}

TEST(Projection, EachRegimeIsReadFromItsRolesRecordsAlone) {
  const RunResults run = load_run(fixture_run());
  for (const ArmResults& a : run.arms) {
    const CriticalPath path = critical_path(a.regime, a.roles);
    EXPECT_FALSE(path.stages.empty()) << a.name;
    EXPECT_EQ(path.model.find("everything in turn"), std::string::npos) << path.model;
  }
  // A regime without a reading, or records without the regime's detail: everything in turn.
  const CriticalPath unknown = critical_path("pipeline", arm(run, "ddp-2").roles);
  EXPECT_EQ(unknown.stages.size(), size_t{1});
  EXPECT_NE(unknown.model.find("everything in turn"), std::string::npos);
  const CriticalPath none = critical_path("single", {});
  EXPECT_TRUE(none.stages.empty());
  EXPECT_EQ(none.model, "no step records");
}

// The report states each regime's cost model as the regime table gives it.
TEST(Projection, AssumptionsStateEachRegimesCostModel) {
  const std::vector<std::string> said = projection_assumptions();
  for (const trainers::Regime* r : trainers::regime_table()) {
    const std::string bullet = std::string(r->name()) + ": " + std::string(r->cost_model());
    EXPECT_NE(std::find(said.begin(), said.end(), bullet), said.end()) << bullet;
  }
}

TEST(Projection, AnArmWithoutRecordsSaysWhyNothingIsProjected) {
  ArmResults a;
  a.name = "pending";
  a.regime = "single";
  const ArmProjection p = project_arm(a);
  EXPECT_FALSE(p.unavailable.empty());
  EXPECT_TRUE(p.links.empty());
}

TEST(Projection, AssumptionsAreStated) {
  const std::vector<std::string> a = projection_assumptions();
  EXPECT_GE(a.size(), 5u);
  EXPECT_NE(a.front().find("bytes × 8 / bandwidth + latency"), std::string::npos);
}

}  // namespace
}  // namespace quartet::analysis

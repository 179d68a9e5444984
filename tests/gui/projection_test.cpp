// The projection of shared/DESIGN.md: time on a link = compute on the critical path +
// Σ over its messages (bytes / bandwidth + latency), read per regime from real records.

#include <QtTest>
#include <cmath>

#include "gui/projection.h"
#include "gui/results_model.h"
#include "tests/gui/gui_test_util.h"
#include "transport/link.h"

using namespace quartet::gui;
using quartet::trainers::PathLeg;
using quartet::trainers::PathStage;

namespace {

const ArmResults& arm(const RunResults& run, const std::string& name) {
  for (const ArmResults& a : run.arms)
    if (a.name == name) return a;
  throw std::runtime_error("no arm " + name);
}

bool near(double a, double b, double rel = 1e-9) { return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b)); }

}  // namespace

class ProjectionTest : public QObject {
  Q_OBJECT

 private slots:
  void PathSecondsIsComputePlusBytesOverBandwidthPlusLatencyPerMessage() {
    // Two stages: one leg; then two legs side by side, the slower one counting.
    const std::vector<PathStage> stages = {PathStage{{PathLeg{1.0, 1e9 / 8, 10}}},
                                           PathStage{{PathLeg{2.0, 0, 0}, PathLeg{0.5, 1e9 / 8, 2}}}};
    double comm = 0.0;
    // 1 Gbit/s, 1 ms: stage 1 = 1 + 1 + 0.01; stage 2 = max(2, 0.5 + 1 + 0.002) = 2.
    QVERIFY(near(path_seconds(stages, 1e9, 1e-3, &comm), 4.01));
    QVERIFY(near(comm, 1.01));
    // At 100 Mbit/s the second stage's networked leg is the slower one: 0.5 + 10 + 0.002.
    QVERIFY(near(path_seconds(stages, 1e8, 1e-3), 1.0 + 10.0 + 0.01 + 10.502));
  }

  void LinksAreTheNetworkPresetsFastestFirst() {
    const std::vector<std::string> links = projection_links();
    QCOMPARE(links.front(), std::string("nvlink"));
    QCOMPARE(links.back(), std::string("lte"));
    QVERIFY(std::find(links.begin(), links.end(), "loopback") == links.end());
    for (size_t i = 1; i < links.size(); ++i)
      QVERIFY(quartet::transport::link_profile(links[i - 1]).bandwidth_bits_per_s >=
              quartet::transport::link_profile(links[i]).bandwidth_bits_per_s);
  }

  void OneProcessArmsTakeTheSameTimeOnEveryLink() {
    const RunResults run = load_run(gui_test::fixture_run());
    for (const char* name : {"single", "accum-2"}) {
      const ArmProjection p = project_arm(arm(run, name));
      QVERIFY(p.unavailable.empty());
      QCOMPARE(p.bytes_per_epoch, 0.0);
      for (const LinkEstimate& e : p.links) QVERIFY(near(e.seconds_per_epoch, p.compute_seconds_per_epoch));
    }
  }

  void DataParallelPaysItsRanksRingTrafficPerEpoch() {
    const RunResults run = load_run(gui_test::fixture_run());
    const ArmResults& ddp = arm(run, "ddp-2");
    const ArmProjection p = project_arm(ddp);
    // Each rank's bytes are the ring's: half the arm's sent bytes per rank, over the epochs.
    const double sent = ddp.summary["bytes"]["sent"].get<double>();
    QVERIFY(near(p.bytes_per_epoch, sent / 2 / p.epochs, 0.01));
    QVERIFY(p.messages_per_epoch > 0);
    const LinkEstimate& lte = p.links.back();
    const auto profile = quartet::transport::link_profile("lte");
    QVERIFY(near(lte.comm_seconds_per_epoch,
                 p.bytes_per_epoch * 8 / profile.bandwidth_bits_per_s + p.messages_per_epoch * profile.latency_s, 0.01));
    // Slower links never make an arm faster.
    for (size_t i = 1; i < p.links.size(); ++i) QVERIFY(p.links[i].seconds_per_epoch >= p.links[i - 1].seconds_per_epoch);
  }

  void FederatedAndSplitAreProjectedOntoTheLinkTheyRanOnToo() {
    const RunResults run = load_run(gui_test::fixture_run());
    for (const char* name : {"fedavg-4", "split-2"}) {
      const ArmProjection p = project_arm(arm(run, name));
      QVERIFY2(p.unavailable.empty(), name);
      QVERIFY(p.on_measured_link.has_value());
      QCOMPARE(p.on_measured_link->link, arm(run, name).link);
      QVERIFY(p.measured_seconds_per_epoch > 0);
      QVERIFY(p.bytes_per_epoch > 0);
      QVERIFY2(p.path_model.find("everything in turn") == std::string::npos, p.path_model.c_str());
    }
  }

  void EachRegimeIsReadFromItsRolesRecordsAlone() {
    const RunResults run = load_run(gui_test::fixture_run());
    for (const ArmResults& a : run.arms) {
      const quartet::trainers::CriticalPath path = critical_path(a.regime, a.roles);
      QVERIFY2(!path.stages.empty(), a.name.c_str());
      QVERIFY2(path.model.find("everything in turn") == std::string::npos, path.model.c_str());
    }
    // A regime without a reading, or records without the regime's detail: everything in turn.
    const quartet::trainers::CriticalPath unknown = critical_path("pipeline", arm(run, "ddp-2").roles);
    QCOMPARE(unknown.stages.size(), size_t{1});
    QVERIFY(unknown.model.find("everything in turn") != std::string::npos);
    const quartet::trainers::CriticalPath none = critical_path("single", {});
    QVERIFY(none.stages.empty());
    QCOMPARE(none.model, std::string("no step records"));
  }

  void AnArmWithoutRecordsSaysWhyNothingIsProjected() {
    ArmResults a;
    a.name = "pending";
    a.regime = "single";
    const ArmProjection p = project_arm(a);
    QVERIFY(!p.unavailable.empty());
    QVERIFY(p.links.empty());
  }

  void AssumptionsAreStated() {
    const std::vector<std::string> a = projection_assumptions();
    QVERIFY(a.size() >= 5);
    QVERIFY(a.front().find("bytes × 8 / bandwidth + latency") != std::string::npos);
  }
};

QTEST_GUILESS_MAIN(ProjectionTest)
#include "projection_test.moc"

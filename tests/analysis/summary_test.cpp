#include "analysis/summary.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace quartet::analysis {
namespace {

using nlohmann::json;

constexpr int64_t kMiB = 1024 * 1024;

json memory(int64_t total_peak) {
  return {{"activations", {{"current", 0}, {"peak", total_peak / 2}}}, {"total", {{"current", 0}, {"peak", total_peak}}}};
}

// A step record as a role writes it; `accuracy` < 0: not evaluated.
json step(const std::string& role, int64_t step, double accuracy, int64_t tracked, int64_t rss) {
  json r = {{"type", "step"},
            {"role", role},
            {"step", step},
            {"samples", step * 100},
            {"epoch", step * 0.1},
            {"wall", 1.0 * step},
            {"compute", {{"forward", 0.1}, {"backward", 0.1}, {"optimizer", 0.0}}},
            {"memory", memory(tracked)},
            {"rss_peak", rss}};
  if (accuracy >= 0) r["eval"] = {{"value", accuracy}, {"seconds", 0.0}};
  return r;
}

// A federated pool's record of one client's round: it trains, so it carries memory.
json client_round(const std::string& pool, int64_t round, int64_t tracked, int64_t rss) {
  return {{"type", "client_round"}, {"role", pool}, {"round", round}, {"memory", memory(tracked)}, {"rss_peak", rss}};
}

// A server that evaluates each of three rounds and two pools that do the training.
std::vector<std::vector<json>> federated_records() {
  return {{step("server", 1, 0.50, 1 * kMiB, 100 * kMiB), step("server", 2, 0.70, 1 * kMiB, 101 * kMiB),
           step("server", 3, 0.80, 1 * kMiB, 102 * kMiB)},
          {client_round("pool0", 1, 6 * kMiB, 80 * kMiB), client_round("pool0", 2, 7 * kMiB, 90 * kMiB)},
          {client_round("pool1", 1, 5 * kMiB, 85 * kMiB), client_round("pool1", 3, 5 * kMiB, 150 * kMiB)}};
}

TEST(Results, FederatedSummaryReportsThePoolsMemoryBesideTheServers) {
  const json s = summarize_arm("fed", "federated", federated_records(), std::nullopt, 1000);
  const json& mem = s["memory_peak_bytes"];
  EXPECT_EQ(mem["by_role"]["server"]["rss"], 102 * kMiB);
  EXPECT_EQ(mem["by_role"]["server"]["total"], 1 * kMiB);
  EXPECT_EQ(mem["by_role"]["pool0"]["rss"], 90 * kMiB);
  EXPECT_EQ(mem["by_role"]["pool0"]["total"], 7 * kMiB);
  EXPECT_EQ(mem["by_role"]["pool1"]["rss"], 150 * kMiB);
  EXPECT_EQ(mem["rss"], 150 * kMiB);  // the largest process, a pool
  EXPECT_EQ(mem["total"], 7 * kMiB);
  EXPECT_EQ(mem["by_tag"]["activations"], 7 * kMiB / 2);
  // Pool records are not steps: the arm's steps and evaluations are still the server's.
  EXPECT_EQ(s["steps"], 3);
  EXPECT_EQ(s["evaluations"].size(), 3u);
}

TEST(Results, TableShowsEachKindOfProcessForAFederatedArm) {
  const json s = summarize_arm("fed", "federated", federated_records(), std::nullopt, 1000);
  const std::string table = summary_table("run", {s});
  EXPECT_NE(table.find("| pool 7.0 · server 1.0 | pool 150.0 · server 102.0 |"), std::string::npos) << table;
}

TEST(Results, TableShowsOneMemoryFigureForAOneKindArm) {
  const std::vector<std::vector<json>> ranks = {{step("rank0", 1, 0.6, 3 * kMiB, 40 * kMiB)},
                                                {step("rank1", 1, 0.6, 4 * kMiB, 50 * kMiB)}};
  const std::string table = summary_table("run", {summarize_arm("ddp", "data_parallel", ranks, std::nullopt, 1000)});
  EXPECT_NE(table.find("| 4.0 | 50.0 |"), std::string::npos) << table;
}

TEST(Results, TableGivesSlowRatesTwoDecimals) {
  const std::vector<std::vector<json>> records = {{step("trainer", 1, 0.6, kMiB, 10 * kMiB)}};
  json slow = summarize_arm("ct", "single", records, std::nullopt, 1000);
  json fast = slow;
  slow["samples_per_second"] = 2.268;
  fast["samples_per_second"] = 3650.4;
  const std::string table = summary_table("run", {slow, fast});
  EXPECT_NE(table.find("| 2.27 |"), std::string::npos) << table;
  EXPECT_NE(table.find("| 3650 |"), std::string::npos) << table;
}

// Kernel choices the machine's table lacked are measured while the arm runs, and every
// rank waits for them: training time leaves out the most any role spent (each role's
// records carry its process's running total; a resumed process starts again from 0).
TEST(Results, KernelTuningIsLeftOutOfTrainingTime) {
  json a1 = step("rank0", 1, -1, kMiB, kMiB), a2 = step("rank0", 2, -1, kMiB, kMiB), a3 = step("rank0", 3, -1, kMiB, kMiB);
  json b1 = step("rank1", 1, -1, kMiB, kMiB), b2 = step("rank1", 2, -1, kMiB, kMiB);
  a1["kernel_tuning"] = 0.4, a2["kernel_tuning"] = 0.5, a3["kernel_tuning"] = 0.1;  // resumed before step 3
  b1["kernel_tuning"] = 0.2, b2["kernel_tuning"] = 0.2;
  const json s = summarize_arm("ddp", "data_parallel", {{a1, a2, a3}, {b1, b2}}, std::nullopt, 1000);
  EXPECT_DOUBLE_EQ(s["kernel_tuning_seconds"].get<double>(), 0.6);
  EXPECT_DOUBLE_EQ(s["train_seconds"].get<double>(), 3.0 - 0.6);
  EXPECT_DOUBLE_EQ(s["samples_per_second"].get<double>(), 300 / 2.4);
  const json none = summarize_arm("single", "single", {{step("trainer", 2, -1, kMiB, kMiB)}}, std::nullopt, 1000);
  EXPECT_DOUBLE_EQ(none["kernel_tuning_seconds"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(none["train_seconds"].get<double>(), 2.0);
}

TEST(Results, ArmThatTrainedNoSampleFailsAndSaysWhy) {
  // A split arm whose every turn was lost: the server recorded its steps, none trained.
  json step_record = step("server", 1, 0.1, kMiB, 10 * kMiB);
  step_record["samples"] = 0;
  const json none = summarize_arm("sl", "split", {{step_record}}, std::nullopt, 1000);
  std::string failure;
  EXPECT_EQ(arm_status(false, failure, none), "failed");
  EXPECT_NE(failure.find("trained no sample"), std::string::npos) << failure;

  const json some = summarize_arm("sl", "split", {{step("server", 1, 0.1, kMiB, 10 * kMiB)}}, std::nullopt, 1000);
  std::string no_failure;
  EXPECT_EQ(arm_status(false, no_failure, some), "finished");
  EXPECT_TRUE(no_failure.empty());
  std::string role_failed = "role rank1 failed";
  EXPECT_EQ(arm_status(false, role_failed, some), "failed");
  EXPECT_EQ(role_failed, "role rank1 failed");  // the first cause is kept
  EXPECT_EQ(arm_status(true, no_failure, none), "interrupted");
}

// A run that went badly never says finished: a non-finite loss is divergence, a step short
// of its clients (or a lost pool) is degradation; both are counted and said.
TEST(Results, NonFiniteLossesDivergeAndShortStepsDegrade) {
  json nan_step = step("trainer", 2, 0.2, kMiB, 10 * kMiB);
  nan_step["loss"] = nullptr;  // how JSON writes NaN
  const json diverged =
      summarize_arm("s", "single", {{step("trainer", 1, 0.1, kMiB, 10 * kMiB), nan_step}}, std::nullopt, 1000);
  EXPECT_EQ(diverged["nonfinite_loss_steps"], 1);
  EXPECT_EQ(diverged["first_nonfinite_step"], 2);
  std::string why;
  EXPECT_EQ(arm_status(false, why, diverged), "diverged");
  EXPECT_NE(why.find("non-finite loss, the first at step 2"), std::string::npos) << why;

  json short_step = step("server", 1, 0.1, kMiB, 10 * kMiB);
  short_step["degraded"] = "round 1: 1 of 2 sampled clients' updates";
  const json degraded = summarize_arm("f", "federated", {{short_step}}, std::nullopt, 1000);
  EXPECT_EQ(degraded["degraded_steps"], 1);
  std::string short_why;
  EXPECT_EQ(arm_status(false, short_why, degraded), "degraded");
  EXPECT_NE(short_why.find("round 1: 1 of 2"), std::string::npos) << short_why;

  const json whole = summarize_arm("f", "federated", {{step("server", 1, 0.1, kMiB, 10 * kMiB)}}, std::nullopt, 1000);
  std::string lost_why;
  EXPECT_EQ(arm_status(false, lost_why, whole, {"role pool1 failed (killed by signal Killed)"}), "degraded");
  EXPECT_NE(lost_why.find("lost role pool1"), std::string::npos) << lost_why;
  std::string none;
  EXPECT_EQ(arm_status(false, none, whole), "finished");
}

// Rounds short of their clients record what they planned: at half the plan or more the
// arm is degraded and says its share; below half it failed, saying what it trained.
TEST(Results, AnArmThatLostWorkFailsBelowHalfItsPlanAndShowsItsShare) {
  auto rounds = [](int64_t planned_per_round) {
    std::vector<json> lines;
    for (int64_t r = 1; r <= 4; ++r) {
      json s = step("server", r, 0.5, kMiB, 10 * kMiB);  // samples: 100 a round
      s["planned_samples"] = r * planned_per_round;
      if (planned_per_round > 100) s["degraded"] = "round " + std::to_string(r) + ": 1 of 2 sampled clients' updates";
      lines.push_back(s);
    }
    return summarize_arm("f", "federated", {lines}, std::nullopt, 1000);
  };
  json degraded = rounds(160);  // 400 of 640: 62 %
  EXPECT_EQ(degraded["planned_samples"], 640);
  EXPECT_DOUBLE_EQ(degraded["trained_share"].get<double>(), 0.625);
  std::string why;
  EXPECT_EQ(arm_status(false, why, degraded), "degraded");
  EXPECT_EQ(why.rfind("trained 400 of 640 planned samples (62 %); 4 steps short", 0), 0u) << why;
  degraded["status"] = "degraded";
  EXPECT_EQ(status_text(degraded), "degraded (62 % trained)");

  json failed = rounds(1000);  // 400 of 4000: 10 %
  std::string failed_why;
  EXPECT_EQ(arm_status(false, failed_why, failed), "failed");
  EXPECT_EQ(failed_why.rfind("trained 400 of 4000 planned samples (10 %)", 0), 0u) << failed_why;
  EXPECT_NE(failed_why.find("; less than 50 % of the plan"), std::string::npos) << failed_why;

  // Nothing lost: the plan met, finished, whatever the share field says.
  std::string none;
  EXPECT_EQ(arm_status(false, none, rounds(100)), "finished");
  json finished = rounds(100);
  finished["status"] = "finished";
  EXPECT_EQ(status_text(finished), "finished");
}

TEST(Results, FederatedArmReportsTheRoundThatReachedTheTarget) {
  const json s = summarize_arm("fed", "federated", federated_records(), 0.7, 1000);
  ASSERT_FALSE(s["to_target"].is_null());
  EXPECT_EQ(s["to_target"]["rounds"], 2);
  EXPECT_EQ(s["to_target"]["samples"], 200);
  EXPECT_NE(summary_table("run", {s}).find("| 2.0 s, 200, round 2 |"), std::string::npos);
}

TEST(Results, TargetNotReachedIsSaidSo) {
  const json s = summarize_arm("fed", "federated", federated_records(), 0.9, 1000);
  EXPECT_TRUE(s["to_target"].is_null());
  EXPECT_NE(summary_table("run", {s}).find("| not reached |"), std::string::npos);
}

TEST(Results, StepArmsReportTheirStepToTargetWithoutRounds) {
  const std::vector<std::vector<json>> single = {{step("single", 1, 0.5, kMiB, kMiB), step("single", 2, 0.9, kMiB, kMiB)}};
  const json s = summarize_arm("single", "single", single, 0.8, 1000);
  EXPECT_EQ(s["to_target"]["step"], 2);
  EXPECT_FALSE(s["to_target"].contains("rounds"));
}

// Bits per character improve downwards: the target is reached at or below it, and the
// best evaluation is the lowest.
TEST(Results, LowerIsBetterMetricReachesItsTargetFromAbove) {
  std::vector<std::vector<json>> text = {{step("single", 1, 3.0, kMiB, kMiB), step("single", 2, 2.4, kMiB, kMiB),
                                          step("single", 3, 2.6, kMiB, kMiB)}};
  for (json& r : text[0]) r["eval"]["metric"] = "bpc";
  const json s = summarize_arm("single", "single", text, 2.5, 1000);
  EXPECT_EQ(s["metric"], "bpc");
  EXPECT_EQ(s["to_target"]["step"], 2);
  EXPECT_NE(summary_table("run", {s}).find("| 2.6000 | 2.4000 (epoch 0.2) |"), std::string::npos)
      << summary_table("run", {s});
  EXPECT_TRUE(summarize_arm("single", "single", text, 2.0, 1000)["to_target"].is_null());
}

TEST(Results, HigherIsBetterMetricKeepsItsBestAndTarget) {
  const json s = summarize_arm("fed", "federated", federated_records(), 0.7, 1000);
  EXPECT_EQ(s["metric"], "accuracy");  // records without a metric name are accuracy
  EXPECT_NE(summary_table("run", {s}).find("| 0.8000 | 0.8000 (epoch 0.3) |"), std::string::npos)
      << summary_table("run", {s});
}

// A DP arm's summary keeps its last round's privacy account, and summary.md adds the
// privacy table; an arm without DP has none and no row.
TEST(Results, DpArmSummaryCarriesTheFinalEpsilonAndTheTableShowsIt) {
  std::vector<std::vector<json>> dp = federated_records();
  for (int64_t i = 0; i < 3; ++i)
    dp[0][i]["privacy"] = {{"clip", 0.5},          {"noise_multiplier", 1.0}, {"noise_std", 0.01},
                           {"sampling_rate", 0.25}, {"clipped", 3},            {"update_norm_median", 0.7},
                           {"rounds", i + 1},       {"epsilon", 0.5 * (i + 1)}, {"delta", 1e-5}};
  dp[0][2]["privacy"]["epsilon"] = 1.234;
  const json s = summarize_arm("dp", "federated", dp, std::nullopt, 1000);
  EXPECT_EQ(s["privacy"]["rounds"], 3);
  EXPECT_DOUBLE_EQ(s["privacy"]["epsilon"].get<double>(), 1.234);
  const json plain = summarize_arm("fed", "federated", federated_records(), std::nullopt, 1000);
  EXPECT_TRUE(plain["privacy"].is_null());
  const std::string table = summary_table("run", {plain, s});
  EXPECT_NE(table.find("| dp | 0.500 | 1.00 | 0.250 | 3 | 1.23 | 1e-05 | 0.8000 |"), std::string::npos) << table;
  EXPECT_EQ(table.find("| fed | 0."), std::string::npos) << table;
  EXPECT_EQ(summary_table("run", {plain}).find("epsilon"), std::string::npos);
}

}  // namespace
}  // namespace quartet::analysis

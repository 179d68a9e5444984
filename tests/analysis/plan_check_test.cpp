#include "analysis/plan_check.h"

#include <gtest/gtest.h>

namespace quartet::analysis {
namespace {

using nlohmann::json;

TEST(PlanCheck, AnArmsJsonBecomesItsMeshAndKnobs) {
  const json ddp = json::parse(R"({"name": "d", "regime": "data_parallel", "ranks": 4, "zero": 2, "micro_batches": 2,
      "bucket_mb": 1.0, "backend": "hierarchical", "link": "10gbe",
      "train": {"batch": 64, "checkpoint": true, "optimizer": {"name": "sgd"}}})");
  const plan::PlanArm a = plan_arm_of(ddp, "cnn", 0);
  EXPECT_EQ(a.mesh.dp, 4);
  EXPECT_EQ(a.zero, 2);
  EXPECT_EQ(a.micro_batches, 2);
  EXPECT_EQ(a.batch, 64);
  EXPECT_TRUE(a.checkpointing);
  EXPECT_EQ(a.optimizer, "sgd");
  EXPECT_EQ(a.algorithm, "hierarchical");
  EXPECT_DOUBLE_EQ(a.bucket_bytes, 1024 * 1024);
  EXPECT_DOUBLE_EQ(a.link_bandwidth_bytes_per_s, 10e9 / 8);

  const json pipe = json::parse(R"({"name": "p", "regime": "pipeline", "cuts": ["enc2", "dec2"], "micro_batches": 4,
      "schedule": "gpipe", "train": {"batch": 8}})");
  const plan::PlanArm p = plan_arm_of(pipe, "unet3d-32", 0);
  EXPECT_EQ(p.mesh.pp, 3);
  EXPECT_EQ(p.schedule, "gpipe");

  const json fed = json::parse(R"({"name": "f", "regime": "federated", "clients": 10, "fraction": 0.5,
      "micro_batches": 3, "train": {"batch": 32}})");
  const plan::PlanArm f = plan_arm_of(fed, "cnn", 60000);
  EXPECT_EQ(f.client_samples, 6000);
  EXPECT_EQ(f.micro_batches, 1);  // not a field of federated arms

  const json mesh = json::parse(R"({"name": "m", "regime": "mesh", "mesh": {"dp": 2, "tp": 2, "pp": 2},
      "micro_batches": 2, "zero": 1, "sequence_parallel": true, "train": {"batch": 16}})");
  const plan::PlanArm m = plan_arm_of(mesh, "gpt-mini", 0);
  EXPECT_EQ(m.mesh, (plan::Mesh{.tp = 2, .cp = 1, .ep = 1, .dp = 2, .pp = 2}));
  EXPECT_EQ(m.micro_batches, 2);
  EXPECT_EQ(m.zero, 1);
  EXPECT_TRUE(m.sequence_parallel);
  EXPECT_EQ(m.schedule, "sequential");  // the mesh's micro-batches do not overlap
  const json ep = json::parse(R"({"name": "e", "regime": "expert_parallel", "ranks": 2, "train": {"batch": 16}})");
  EXPECT_EQ(plan_arm_of(ep, "gpt-moe", 0).mesh.ep, 2);
}

TEST(PlanCheck, UnetIsNamedByItsPatch) {
  EXPECT_EQ(plan_model_name(json{{"model", "unet3d"}, {"patch", 64}}, json::object()), "unet3d-64");
  EXPECT_EQ(plan_model_name(json{{"model", "cnn"}}, json{{"model", "mlp"}}), "mlp");
}

TEST(PlanCheck, TheTableShowsTheSignedErrorAndTheSummaryItsSpread) {
  const std::vector<CheckRow> rows = {{"a", "single", 110, 100, ""}, {"b", "split", 80, 100, ""},
                                      {"c", "federated", 50, 0, ""}, {"d", "expert_parallel", 0, 20, "no shape"}};
  const Table t = check_table(rows);
  ASSERT_EQ(t.rows.size(), 4u);
  EXPECT_EQ(t.rows[0][4], "+10.0 %");
  EXPECT_EQ(t.rows[1][4], "-20.0 %");
  EXPECT_EQ(t.rows[2][4], "not measured");
  EXPECT_EQ(t.rows[3][4], "not planned");
  EXPECT_EQ(check_summary(rows), "Median |error| over 2 arms: 15.0 %, largest 20.0 %");
  EXPECT_EQ(check_summary({}), "");
}

// A federated arm's records give its rounds: per round, per pool, each client's samples.
TEST(PlanCheck, ClientRoundsAreReadFromThePoolsRecords) {
  ArmResults arm;
  arm.roles = {{"server", {json{{"type", "round"}, {"round", 1}}}},
               {"pool0", {json{{"type", "client_round"}, {"round", 1}, {"samples_processed", 896}},
                          json{{"type", "client_round"}, {"round", 2}, {"samples_processed", 128}}}},
               {"pool1", {json{{"type", "client_round"}, {"round", 1}, {"samples_processed", 256}},
                          json{{"type", "client_round"}, {"round", 1}, {"samples_processed", 512}}}}};
  const auto rounds = client_rounds(arm);
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(rounds[0], (std::vector<std::vector<int64_t>>{{896}, {256, 512}}));
  EXPECT_EQ(rounds[1], (std::vector<std::vector<int64_t>>{{128}, {}}));
}

// A run of the whole training set (workload.train_samples 0) gives a federated client
// its share of the set's size, which an arm's summary gives as samples over epochs.
TEST(PlanCheck, TheWholeTrainingSetsSizeComesFromTheSummaries) {
  RunResults run;
  run.spec = json::parse(R"({"workload": {"name": "fashion-mnist", "model": "cnn", "train_samples": 0},
      "arms": [{"name": "f", "regime": "federated", "clients": 10, "fraction": 0.5, "train": {"batch": 128}}]})");
  ArmResults arm;
  arm.name = "f";
  arm.summary = json{{"samples", 56704}, {"epochs", 56704.0 / 60000.0}, {"samples_per_second", 1000.0},
                     {"train_seconds", 56.704}};
  run.arms.push_back(arm);
  plan::ClusterProfile c = plan::load_cluster_file(std::string(QUARTET_SOURCE_DIR) + "/clusters/cpu-10gbe.json");
  const std::vector<CheckRow> derived = check_rows(run, c), given = check_rows(run, c, 60000);
  ASSERT_EQ(derived.size(), 1u);
  EXPECT_TRUE(derived[0].unsupported.empty()) << derived[0].unsupported;
  EXPECT_DOUBLE_EQ(derived[0].predicted, given[0].predicted);
  EXPECT_NE(derived[0].predicted, check_rows(run, c, 1280)[0].predicted);
}

}  // namespace
}  // namespace quartet::analysis

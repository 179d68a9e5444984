// The pipeline regime: its schedules as pure functions, its settings' checks, and its
// stages as threads of one process over a real coordinator and sockets, as the processes
// of `quartet run` do it, proved against accumulate with the same micro-batches.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

#include "engine/safetensors.h"
#include "tests/temp_folder.h"
#include "tests/trainers/trainer_test_util.h"
#include "trainers/pipeline/pipeline.h"
#include "trainers/pipeline/links.h"
#include "trainers/split/protocol.h"
#include "transport/server.h"
#include "workloads/workload.h"

namespace quartet::trainers::pipeline {
namespace {

using testing::max_abs_diff;
namespace fs = std::filesystem;
using nlohmann::json;

// --- schedules ------------------------------------------------------------------------

std::string order(const std::string& schedule, int64_t stage) { return to_string(stage_schedule(schedule, stage, 4, 8)); }

TEST(PipelineSchedule, GPipeRunsEveryForwardThenEveryBackwardOnEachStage) {
  for (int64_t s = 0; s < 4; ++s)
    EXPECT_EQ(order("gpipe", s), "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7") << "stage " << s;
}

// PipeDream-flush (Narayanan et al. 2021, figure 4): P-1-s warm-up forwards, then one
// forward one backward, then the cool-down backwards.
TEST(PipelineSchedule, OneFOneBForFourStagesAndEightMicroBatchesIsTheTextbookOrder) {
  EXPECT_EQ(order("1f1b", 0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(order("1f1b", 1), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(order("1f1b", 2), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(order("1f1b", 3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
}

TEST(PipelineSchedule, OneFOneBHoldsAtMostPMicroBatchesAndGPipeHoldsM) {
  for (int64_t P : {2, 4})
    for (int64_t m : {1, 2, 4, 8})
      for (int64_t s = 0; s < P; ++s) {
        EXPECT_EQ(most_in_flight(stage_schedule("gpipe", s, P, m)), m);
        EXPECT_EQ(most_in_flight(stage_schedule("1f1b", s, P, m)), std::min(P - s, m));
      }
}

TEST(PipelineSchedule, BubbleIsPMinusOneOverMPlusPMinusOne) {
  EXPECT_DOUBLE_EQ(bubble_fraction(4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(1, 8), 0.0);
}

// --- settings -------------------------------------------------------------------------

class PipelineSettings : public ::testing::Test {
 protected:
  ArmFacts facts() const {
    ArmFacts f;
    f.path = "spec.arms[1]";
    f.train.batch = 32;
    f.model = "cnn";
    f.stages = {"conv1", "conv2", "fc1", "fc2"};
    return f;
  }
  std::string refusal(json fields, const ArmFacts& f) const {
    try {
      find_regime("pipeline").parse(std::move(fields), f);
    } catch (const SettingsError& e) {
      return e.what();
    }
    return "accepted";
  }
  std::string refusal(json fields) const { return refusal(std::move(fields), facts()); }
};

TEST_F(PipelineSettings, UnknownCutIsRefusedListingTheStages) {
  EXPECT_EQ(refusal({{"cuts", {"conv3"}}}),
            "spec.arms[1].cuts[0]: \"conv3\" is not a stage of cnn; its stages are \"conv1\", \"conv2\", \"fc1\", \"fc2\"");
}

TEST_F(PipelineSettings, CutsOutOfOrderAreRefused) {
  EXPECT_EQ(refusal({{"cuts", {"fc1", "conv1"}}}),
            "spec.arms[1].cuts[1]: \"conv1\" does not come after \"fc1\"; cuts name different stages in the model's "
            "order: \"conv1\", \"conv2\", \"fc1\", \"fc2\"");
  EXPECT_NE(refusal({{"cuts", {"conv1", "conv1"}}}).find("does not come after"), std::string::npos);
}

TEST_F(PipelineSettings, TheLastStageIsNoCut) {
  EXPECT_NE(refusal({{"cuts", {"fc2"}}}).find("\"fc2\" is the last stage"), std::string::npos);
}

TEST_F(PipelineSettings, MicroBatchesMustDivideTheBatch) {
  EXPECT_EQ(refusal({{"cuts", {"conv2"}}, {"micro_batches", 5}}),
            "spec.arms[1].micro_batches: 5 does not divide the batch 32; batches must split evenly");
}

TEST_F(PipelineSettings, CutsAndScheduleAreNeededAndChecked) {
  EXPECT_NE(refusal(json::object()).find("cuts"), std::string::npos);
  EXPECT_NE(refusal({{"cuts", json::array()}}).find("cuts"), std::string::npos);
  const std::string bad = refusal({{"cuts", {"conv2"}}, {"schedule", "interleaved"}});
  EXPECT_NE(bad.find("gpipe"), std::string::npos) << bad;
  EXPECT_NE(bad.find("1f1b"), std::string::npos) << bad;
}

TEST_F(PipelineSettings, StagesOverTheMachinesProcessLimitAreRefused) {
  ArmFacts f = facts();
  f.limits = MachineLimits{.processes = 3, .threads = 16, .clients = 16, .memory = 1 << 30, .basis = "test"};
  EXPECT_EQ(refusal({{"cuts", {"conv2"}}}, f), "accepted");
  EXPECT_EQ(refusal({{"cuts", {"conv1", "conv2", "fc1"}}}, f),
            "spec.arms[1].cuts: 4 stage processes on this host exceed this machine's limit of 3 (test); "
            "\"override_limits\": true (the arm's, or the experiment's) goes past it");
}

TEST_F(PipelineSettings, ClippingIsRefused) {
  ArmFacts f = facts();
  f.train.clip_grad_norm = 1.0;
  EXPECT_NE(refusal({{"cuts", {"conv2"}}}, f).find("clip_grad_norm"), std::string::npos);
}

TEST_F(PipelineSettings, RolesAreOneStageProcessEach) {
  const auto s = find_regime("pipeline").parse({{"cuts", {"conv1", "conv2", "fc1"}}}, facts());
  EXPECT_EQ(find_regime("pipeline").roles(*s), (std::vector<std::string>{"stage0", "stage1", "stage2", "stage3"}));
}

// --- training -------------------------------------------------------------------------

class Pipeline : public testing::RegimeTest {
 protected:
  Pipeline() : RegimeTest("pipeline") {}

  void SetUp() override {
    RegimeTest::SetUp();
    workloads::WorkloadConfig wc;
    wc.name = "synthetic";
    wc.model = "cnn";
    wc.train_limit = 256;
    wc.test_limit = 64;
    use_workload(wc);
  }

  RoleContext context(const std::string& arm, const std::string& regime, json fields) {
    RoleContext c = RegimeTest::context(arm, 32, 4);
    c.settings = testing::regime_settings(regime, c, std::move(fields));
    return c;
  }

  void run_pipeline(const std::string& arm, std::vector<std::string> cuts, const std::string& schedule) {
    testing::run_roles_as_threads(
        "pipeline", context(arm, "pipeline", {{"cuts", cuts}, {"micro_batches", kMicro}, {"schedule", schedule}}));
  }

  // Runs single and accumulate with kMicro micro-batches, then the pipeline with `cuts`
  // under both schedules, and compares their final weights.
  void expect_equal_to_accumulate(const std::vector<std::string>& cuts) {
    RoleContext single = context("single", "single", json::object());
    find_regime("single").run_role(single);
    find_regime("accumulate").run_role(context("accumulate", "accumulate", {{"micro_batches", kMicro}}));
    EXPECT_GT(max_abs_diff(final_weights("single"), engine::load_safetensors(init_.string())), 1e-3);
    for (const std::string schedule : {"gpipe", "1f1b"}) {
      const std::string arm = schedule + "-" + std::to_string(cuts.size() + 1);
      run_pipeline(arm, cuts, schedule);
      const double vs_accumulate = max_abs_diff(final_weights("accumulate"), final_weights(arm));
      const double vs_single = max_abs_diff(final_weights("single"), final_weights(arm));
      std::cout << "[ measured ] " << arm << ": max |param diff| vs accumulate " << vs_accumulate << ", vs single "
                << vs_single << "\n";
      EXPECT_LT(vs_accumulate, kSameUpdate) << arm;
      EXPECT_LT(vs_single, kSameUpdate) << arm;
    }
  }

  // The accumulate test's tolerance (tests/trainers/training_loop_test.cpp): float sums
  // in another order over a few SGD steps with momentum.
  static constexpr double kSameUpdate = 1e-5;
  static constexpr int64_t kMicro = 4;
};

TEST_F(Pipeline, TwoStagesEqualAccumulateWithTheSameMicroBatchesUnderBothSchedules) {
  expect_equal_to_accumulate({"conv2"});
}

TEST_F(Pipeline, FourStagesEqualAccumulateWithTheSameMicroBatchesUnderBothSchedules) {
  expect_equal_to_accumulate({"conv1", "conv2", "fc1"});
}

// Each stage's records: its compute and idle time, bytes, the micro-batches it held at
// once (1F1B: P - stage; GPipe: m), the bubble formula, the step's timeline; stage 0
// evaluates. Memory is counted per process, and these stages are threads of one, whose
// peaks one another's evaluations reset: the stages' memory is checked where each is a
// process (tests/cli/cli_test.cpp).
TEST_F(Pipeline, EachStageRecordsBusyIdleBytesAndTheMicroBatchesItHeld) {
  for (const std::string schedule : {"gpipe", "1f1b"}) {
    run_pipeline(schedule, {"conv1", "conv2", "fc1"}, schedule);
    for (int64_t s = 0; s < 4; ++s) {
      const std::vector<json> records = testing::read_records(dir_ / schedule, "stage" + std::to_string(s));
      ASSERT_EQ(records.size(), 4u) << schedule << " stage " << s;
      for (const json& r : records) {
        const json& p = r["pipeline"];
        EXPECT_EQ(p["stage"], s);
        EXPECT_EQ(p["in_flight_peak"].get<int64_t>(), schedule == "gpipe" ? kMicro : std::min<int64_t>(4 - s, kMicro));
        EXPECT_GT(p["busy"].get<double>(), 0.0);
        EXPECT_GE(p["idle"].get<double>(), 0.0);
        EXPECT_DOUBLE_EQ(p["bubble_formula"].get<double>(), 3.0 / 7.0);
        EXPECT_GT(p["step_bytes_sent"].get<int64_t>(), 0);
        EXPECT_GT(r["loss"].get<double>(), 0.0);
        // The timeline: the schedule's operations in order, then the optimizer step.
        const std::vector<Op> ops = stage_schedule(schedule, s, 4, kMicro);
        const json& timeline = p["timeline"];
        ASSERT_EQ(timeline.size(), ops.size() + 1);
        double before = 0.0;
        for (size_t i = 0; i < ops.size(); ++i) {
          EXPECT_EQ(timeline[i][0], ops[i].forward ? "F" : "B");
          EXPECT_EQ(timeline[i][1].get<int64_t>(), ops[i].micro);
          EXPECT_GE(timeline[i][2].get<double>(), before);
          EXPECT_GE(timeline[i][3].get<double>(), timeline[i][2].get<double>());
          before = timeline[i][3].get<double>();
        }
        EXPECT_EQ(timeline.back()[0], "S");
        EXPECT_LE(timeline.back()[3].get<double>(), p["step_wall"].get<double>() + 1e-6);
        EXPECT_GT(p["timeline_start"].get<double>(), 1.7e9);
      }
      EXPECT_EQ(records.back().contains("eval"), s == 0) << schedule << " stage " << s;
      // A step is flushed: every stage's step lasts until stage 0 has stepped (after the
      // last stage), so each counts its idle tail; the stages share the system clock.
      const std::vector<json> first = testing::read_records(dir_ / schedule, "stage0");
      for (size_t i = 0; i < records.size(); ++i) {
        const json& p = records[i]["pipeline"];
        const json& p0 = first[i]["pipeline"];
        const double end = p["timeline_start"].get<double>() + p["step_wall"].get<double>();
        const double stage0_stepped = p0["timeline_start"].get<double>() + p0["timeline"].back()[3].get<double>();
        EXPECT_GE(end, stage0_stepped - 1e-4) << schedule << " stage " << s << " step " << i + 1;
      }
      // Stage 0 receives only gradients and control; the last stage sends only gradients and control.
      const json& traffic = records.back()["pipeline"]["traffic"];
      EXPECT_EQ(traffic.contains("activations"), true);
      EXPECT_EQ(traffic.contains("gradients"), true);
    }
  }
}

// A neighbour that goes away mid-step ends the stage at once with the cause, not after
// step_timeout_s.
TEST_F(Pipeline, AStageWhoseNeighbourDiesFailsPromptlyNamingIt) {
  RoleContext c = context("dies", "pipeline", {{"cuts", {"conv2"}}, {"micro_batches", kMicro}});
  transport::Coordinator coordinator(transport::CoordinatorOptions{});
  auto client_for = [&](const std::string& role, int rank) {
    transport::ClientOptions o;
    o.host = coordinator.host();
    o.port = coordinator.port();
    o.token = coordinator.token();
    o.arm = c.arm;
    o.role = role;
    o.requested_rank = rank;
    o.timeout = std::chrono::seconds(60);
    return std::make_unique<transport::CoordinatorClient>(o);
  };
  // A stand-in for stage 1: takes the first activations, then hangs up.
  auto fake = client_for("stage1", 1);
  transport::ServerOptions so;
  so.token = transport::make_token();
  so.log = [](const std::string&) {};
  transport::Server server(so, [](transport::Connection& conn, const transport::Hello&) {
    transport::send_message(conn, transport::MessageType::welcome, transport::Welcome{1, 2, "{}"},
                            std::chrono::seconds(5));
    conn.receive(std::chrono::seconds(30));
  });
  fake->kv_set(stage_token_key(c.arm, 1), so.token);
  fake->kv_set(stage_address_key(c.arm, 1), "127.0.0.1:" + std::to_string(server.port()));

  auto stage0 = client_for("stage0", 0);
  c.role = "stage0";
  c.coordinator = stage0.get();
  const auto start = std::chrono::steady_clock::now();
  try {
    find_regime("pipeline").run_role(c);
    FAIL() << "stage 0 went on without stage 1";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("pipeline stage0"), std::string::npos) << what;
    EXPECT_NE(what.find("stage 1"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

// unet3d's skip connections cross the cuts as extra tensors; InstanceNorm normalises each
// sample alone, so micro-batches compute single's update on volumes too.
class VolumePipeline : public testing::RegimeTest {
 protected:
  VolumePipeline() : RegimeTest("volume_pipeline") {}
  void SetUp() override {
    RegimeTest::SetUp();
    workloads::WorkloadConfig wc;
    wc.name = "phantom-ct-seg";
    wc.model = "unet3d";
    wc.volumes = 6;
    wc.test_volumes = 2;
    wc.volume_size = 32;
    wc.patch = 16;
    wc.seed = 2;
    use_workload(wc);
  }
  RoleContext context(const std::string& arm, const std::string& regime, json fields) {
    RoleContext c = RegimeTest::context(arm, 4, 2);
    c.config.epochs = 2;
    c.config.eval_batch = 4;
    c.settings = testing::regime_settings(regime, c, std::move(fields));
    return c;
  }
};

TEST_F(VolumePipeline, TwoAndFourStagesOfUnet3dEqualAccumulateUnderBothSchedules) {
  const std::vector<std::string> stages = workload_->make_model("unet3d", 3)->stage_names();
  ASSERT_GE(stages.size(), 5u);
  // Cuts that leave skip tensors crossing them: in the middle; after enc1, in the
  // middle, before the head.
  const std::vector<std::vector<std::string>> cut_sets{
      {stages[stages.size() / 2]}, {stages[0], stages[stages.size() / 2], stages[stages.size() - 2]}};
  find_regime("accumulate").run_role(context("accumulate", "accumulate", {{"micro_batches", 2}}));
  for (const std::vector<std::string>& cuts : cut_sets)
    for (const std::string schedule : {"gpipe", "1f1b"}) {
      const std::string arm = schedule + "-" + std::to_string(cuts.size() + 1);
      testing::run_roles_as_threads(
          "pipeline", context(arm, "pipeline", {{"cuts", cuts}, {"micro_batches", 2}, {"schedule", schedule}}));
      const double diff = max_abs_diff(final_weights("accumulate"), final_weights(arm));
      std::cout << "[ measured ] unet3d " << arm << " vs accumulate 2: max |param diff| = " << diff << "\n";
      EXPECT_LT(diff, 1e-5) << arm;
    }
}

}  // namespace
}  // namespace quartet::trainers::pipeline

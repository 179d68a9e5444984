#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/device.h"
#include "runner/spec.h"
#include "runner/wiring.h"
#include "trainers/accumulate/accumulate.h"
#include "trainers/data_parallel/data_parallel.h"
#include "trainers/limits.h"
#include "trainers/regime.h"
#include "workloads/onnx/model.h"

namespace quartet::runner {
namespace {

using nlohmann::json;

json valid() {
  return json::parse(R"({
    "name": "t",
    "workload": {"name": "synthetic", "model": "mlp"},
    "train": {"epochs": 1, "batch": 32},
    "arms": [{"name": "single", "regime": "single"},
             {"name": "acc", "regime": "accumulate", "micro_batches": 4}]
  })");
}

// The SpecError message for `j`, or "" when it parses.
std::string error_of(json j) {
  try {
    parse_spec(std::move(j));
  } catch (const SpecError& e) {
    return e.what();
  }
  return "";
}

void expect_error(json j, const std::string& fragment) {
  const std::string e = error_of(std::move(j));
  EXPECT_NE(e.find(fragment), std::string::npos) << "message: " << e << "\nexpected to contain: " << fragment;
}

TEST(Spec, ValidSpecParsesWithDefaultsFilledIn) {
  ExperimentSpec s = parse_spec(valid());
  ASSERT_EQ(s.arms.size(), 2u);
  EXPECT_EQ(s.seed, 1u);
  EXPECT_EQ(s.arms[1].settings_as<trainers::accumulate::Settings>().micro_batches, 4);
  EXPECT_EQ(s.arms[0].train.optimizer.name, "sgd");
  EXPECT_EQ(s.json["train"]["eval_batch"], 1000);
}

TEST(Spec, ArmTrainFieldsOverrideTheExperiments) {
  json j = valid();
  j["arms"][1]["train"] = {{"batch", 64}, {"optimizer", {{"lr", 0.2}}}};
  ExperimentSpec s = parse_spec(j);
  EXPECT_EQ(s.arms[0].train.batch, 32);
  EXPECT_EQ(s.arms[1].train.batch, 64);
  EXPECT_DOUBLE_EQ(s.arms[1].train.optimizer.lr, 0.2);
  EXPECT_EQ(s.arms[1].train.epochs, 1);
}

TEST(Spec, MissingFieldIsNamed) {
  json j = valid();
  j["train"].erase("batch");
  expect_error(j, "spec.train.batch: missing");
}

TEST(Spec, WrongTypeNamesFieldFoundAndAllowed) {
  json j = valid();
  j["train"]["batch"] = "lots";
  expect_error(j, "spec.train.batch: expected an integer ≥ 1 and ≤ 16777216, got \"lots\"");
}

TEST(Spec, ZeroOrNegativeBatchIsRefused) {
  json j = valid();
  j["train"]["batch"] = 0;
  expect_error(j, "spec.train.batch: expected an integer ≥ 1 and ≤ 16777216, got 0");
  j["train"]["batch"] = -3;
  expect_error(j, "got -3");
}

TEST(Spec, UnknownRegimeListsTheKnownOnes) {
  json j = valid();
  j["arms"][0]["regime"] = "magic";
  expect_error(j, "spec.arms[0].regime: unknown value \"magic\"; expected one of \"single\", \"accumulate\"");
}

TEST(Spec, UnknownModelListsTheKnownOnes) {
  json j = valid();
  j["workload"]["model"] = "gpt";
  expect_error(j, "spec.workload.model: unknown model \"gpt\"; expected one of \"mlp\", \"lenet5\", \"cnn\"");
}

TEST(Spec, ArmModelDefaultsToTheWorkloadsAndMayBeItsOwn) {
  json j = valid();
  j["arms"][1]["model"] = "cnn-wide";
  const ExperimentSpec s = parse_spec(j);
  EXPECT_EQ(s.arms[0].model, "mlp");
  EXPECT_EQ(s.arms[1].model, "cnn-wide");
  EXPECT_FALSE(s.json["arms"][0].contains("model"));  // absent: the workload's model
  EXPECT_EQ(s.json["arms"][1]["model"], "cnn-wide");
}

TEST(Spec, ArmsWorkloadIsMadeForTheArmsModel) {
  json j = valid();
  j["arms"][1]["model"] = "cnn-wide";
  const ExperimentSpec s = parse_spec(j);
  EXPECT_EQ(workload_config(s, s.arms[0]).model, "mlp");
  EXPECT_EQ(workload_config(s, s.arms[1]).model, "cnn-wide");
}

// Accuracy and Dice end at 1; bits per character (text-lm) have no ceiling, so the
// bound is the workload's, named where the target was written.
TEST(Spec, TargetPastOneIsRefusedForAccuracy) {
  json j = valid();
  j["train"]["target"] = 0.9;
  EXPECT_EQ(error_of(j), "");
  j["train"]["target"] = 1.5;
  EXPECT_EQ(error_of(j), "spec.train.target: synthetic's metric (accuracy) lies in [0, 1]; expected a target in "
                         "(0, 1], got 1.5");
  j["train"]["target"] = 0.9;
  j["arms"][1]["train"] = {{"target", 2.0}};
  expect_error(j, "spec.arms[1].train.target: synthetic's metric (accuracy) lies in [0, 1]");
  j["arms"][1]["train"] = {{"target", 0.0}};
  expect_error(j, "target");
}

TEST(Spec, UnknownArmModelListsTheKnownOnes) {
  json j = valid();
  j["arms"][1]["model"] = "gpt";
  expect_error(j, "spec.arms[1].model: unknown model \"gpt\"; expected one of \"mlp\", \"lenet5\", \"cnn\", "
                  "\"resnet-mini\", \"cnn-wide\"");
  j["arms"][1]["model"] = 3;
  expect_error(j, "spec.arms[1].model: expected a string");
}

// The cut names a stage of the arm's model, not of the workload's.
TEST(Spec, SplitCutIsAStageOfTheArmsOwnModel) {
  json j = valid();
  j["arms"] = json::array({{{"name", "sl"}, {"regime", "split"}, {"cut", "conv2"}}});
  expect_error(j, "spec.arms[0].cut: \"conv2\" is not a stage of mlp");
  j["arms"][0]["model"] = "cnn";
  EXPECT_EQ(parse_spec(j).arms[0].model, "cnn");
  j["arms"][0]["cut"] = "fc1";
  j["arms"][0]["model"] = "lenet5";
  EXPECT_EQ(parse_spec(j).arms[0].model, "lenet5");
  j["arms"][0]["cut"] = "fc3";
  expect_error(j, "spec.arms[0].cut: \"fc3\" is the last stage");
}

TEST(Spec, UnknownWorkloadListsTheKnownOnes) {
  json j = valid();
  j["workload"]["name"] = "imagenet";
  expect_error(j, "spec.workload.name: unknown value \"imagenet\"; expected one of \"fashion-mnist\", \"synthetic\"");
}

TEST(Spec, MicroBatchesThatDoNotDivideTheBatchAreRefused) {
  json j = valid();
  j["arms"][1]["micro_batches"] = 5;
  expect_error(j, "spec.arms[1].micro_batches: 5 does not divide the batch 32");
}

TEST(Spec, MicroBatchesOnANonAccumulateArmAreRefused) {
  json j = valid();
  j["arms"][0]["micro_batches"] = 2;
  expect_error(j, "only the accumulate, data_parallel, pipeline, expert_parallel and mesh regimes take micro_batches");
}

json with_arm(json arm) {
  json j = valid();
  j["arms"].push_back(std::move(arm));
  return j;
}

TEST(Spec, DataParallelArmGetsItsDefaultsFilledIn) {
  const ExperimentSpec s = parse_spec(with_arm({{"name", "ddp"}, {"regime", "data_parallel"}, {"ranks", 2}}));
  const auto& a = s.arms[2].settings_as<trainers::data_parallel::Settings>();
  EXPECT_EQ(a.ranks, 2);
  EXPECT_EQ(a.backend, "gloo");
  EXPECT_DOUBLE_EQ(a.bucket_mb, 25.0);
  EXPECT_FALSE(a.sync_bn);
  EXPECT_EQ(a.zero, 0);
  EXPECT_EQ(a.compress, "none");
  EXPECT_EQ(s.json["arms"][2]["bucket_mb"], 25.0);  // the spec as run says what ran
  EXPECT_FALSE(s.json["arms"][0].contains("ranks"));
}

TEST(Spec, DataParallelNeedsRanks) {
  expect_error(with_arm({{"name", "ddp"}, {"regime", "data_parallel"}}), "spec.arms[2].ranks: missing");
}

TEST(Spec, DataParallelBatchThatDoesNotSplitOverRanksIsRefused) {
  expect_error(with_arm({{"name", "ddp"}, {"regime", "data_parallel"}, {"ranks", 3}}),
               "spec.arms[2].ranks: the batch 32 does not split evenly over 3 ranks x 1 micro_batches");
  // Ranks alone divide 32, ranks x micro_batches do not: both are named.
  expect_error(with_arm({{"name", "ddp"}, {"regime", "data_parallel"}, {"ranks", 4}, {"micro_batches", 16}}),
               "over 4 ranks x 16 micro_batches");
  EXPECT_EQ(error_of(with_arm({{"name", "ddp"}, {"regime", "data_parallel"}, {"ranks", 4}, {"micro_batches", 2}})),
            "");
}

TEST(Spec, DataParallelFieldsOnlyOnDataParallelArms) {
  json j = valid();
  j["arms"][0]["ranks"] = 2;
  expect_error(j, "spec.arms[0].ranks: only the data_parallel, tensor_parallel, context_parallel, expert_parallel and "
                 "mesh regimes take ranks, this arm is single");
  j = valid();
  j["arms"][1]["zero"] = 1;
  expect_error(j, "spec.arms[1].zero: only the data_parallel and mesh regimes take zero");
}

TEST(Spec, DataParallelFieldValuesAreChecked) {
  expect_error(with_arm({{"name", "d"}, {"regime", "data_parallel"}, {"ranks", 0}}), "spec.arms[2].ranks");
  expect_error(with_arm({{"name", "d"}, {"regime", "data_parallel"}, {"ranks", 2}, {"zero", 4}}),
               "spec.arms[2].zero");
  expect_error(with_arm({{"name", "d"}, {"regime", "data_parallel"}, {"ranks", 2}, {"bucket_mb", 0}}),
               "spec.arms[2].bucket_mb");
  expect_error(with_arm({{"name", "d"}, {"regime", "data_parallel"}, {"ranks", 2}, {"backend", "mpi"}}),
               "spec.arms[2].backend");
  expect_error(with_arm({{"name", "d"}, {"regime", "data_parallel"}, {"ranks", 2}, {"compress", "topk"}}),
               "spec.arms[2].compress: unknown value \"topk\"; expected one of \"none\", \"fp16\"");
  expect_error(with_arm({{"name", "d"}, {"regime", "data_parallel"}, {"ranks", 2}, {"sync_bn", "yes"}}),
               "spec.arms[2].sync_bn");
}

TEST(Spec, NcclBackendIsRefusedOnACpuArm) {
  expect_error(with_arm({{"name", "d"}, {"regime", "data_parallel"}, {"ranks", 2}, {"backend", "nccl"}}),
               "spec.arms[2].backend: \"nccl\" reduces GPU memory; this arm runs on the cpu (set its device to "
               "\"cuda\", or use \"gloo\" or \"shm\")");
}

TEST(Spec, RemoteRolesOfADataParallelArmAreItsRanks) {
  json arm = {{"name", "d"}, {"regime", "data_parallel"}, {"ranks", 2}, {"remote", {"rank1"}}};
  EXPECT_EQ(parse_spec(with_arm(arm)).arms[2].remote, std::vector<std::string>{"rank1"});
  arm["remote"] = {"rank2"};
  expect_error(with_arm(arm), "its roles are \"rank0\", \"rank1\"");
}

TEST(Spec, SharedMemoryBackendTakesNoRemoteRanks) {
  json arm = {{"name", "d"}, {"regime", "data_parallel"}, {"ranks", 2}, {"backend", "shm"}};
  EXPECT_EQ(parse_spec(with_arm(arm)).arms[2].settings_as<trainers::data_parallel::Settings>().backend, "shm");
  arm["remote"] = {"rank1"};
  expect_error(with_arm(arm), "spec.arms[2].remote: backend \"shm\" needs every rank on this host");
  arm["backend"] = "tcp";
  expect_error(with_arm(arm), "spec.arms[2].backend");
}

// A ready experiment whose model file a script writes (workload.model_made_by) can be
// read only once that file is there (and in a build that reads ONNX files). Before, it is
// refused naming the script; true when the spec at `path` is such a file not yet written.
bool model_file_not_written(const std::filesystem::path& path) {
  const json w = read_spec_json(path.string()).at("workload");
  const std::string made_by = w.value("model_made_by", "");
  if (made_by.empty()) return false;
  const std::string model = w.at("model").get<std::string>();
  const std::filesystem::path file = path.parent_path() / model.substr(model.find(':') + 1);
  if (!workloads::onnx::available()) return true;
  if (std::filesystem::exists(file)) return false;
  try {
    load_spec_file(path.string());
    ADD_FAILURE() << path << " validates without its model file";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("it is written by `" + made_by + "`: run that first"), std::string::npos)
        << e.what();
  }
  return true;
}

// The ready experiment files (quickstart, scaling, ...) stay valid as the schema grows.
TEST(Spec, ReadyExperimentFilesValidate) {
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(QUARTET_SOURCE_DIR) + "/experiments")) {
    if (e.path().extension() != ".json" || model_file_not_written(e.path())) continue;
    ++files;
    EXPECT_NO_THROW(load_spec_file(e.path().string())) << e.path();
  }
  EXPECT_GE(files, 2);
}

// The command that writes a missing ONNX file is named, with the path.
TEST(Spec, AMissingModelFileNamesTheCommandThatWritesIt) {
  json j = valid();
  j["workload"]["model"] = "onnx:/nonexistent/m.onnx";
  j["workload"]["model_made_by"] = "bench/make_m.py";
  expect_error(j, "spec.workload.model: model onnx:/nonexistent/m.onnx: no such file; it is written by "
                  "`bench/make_m.py`: run that first");
}

TEST(Spec, UnknownFieldIsRefusedListingTheAllowedOnes) {
  json j = valid();
  j["train"]["epoch"] = 3;
  expect_error(j, "spec.train: unknown field \"epoch\"; allowed fields: epochs, batch");
}

TEST(Spec, DuplicateArmNamesAreRefused) {
  json j = valid();
  j["arms"][1]["name"] = "single";
  expect_error(j, "spec.arms[1].name: \"single\" is used by another arm");
}

TEST(Spec, ArmNamesMustBeSafeFolderNames) {
  json j = valid();
  j["arms"][0]["name"] = "../etc";
  expect_error(j, "spec.arms[0].name");
}

TEST(Spec, NesterovWithoutMomentumIsRefused) {
  json j = valid();
  j["train"]["optimizer"] = {{"nesterov", true}};
  expect_error(j, ".train.optimizer.nesterov: Nesterov momentum needs momentum > 0");
}

TEST(Spec, AdamAndSchedulesParse) {
  json j = valid();
  j["train"]["optimizer"] = {{"name", "adamw"}, {"lr", 0.001}, {"weight_decay", 0.01}};
  j["train"]["schedule"] = {{"name", "cosine"}, {"warmup_steps", 10}, {"scale_base_batch", 256}};
  ExperimentSpec s = parse_spec(j);
  EXPECT_EQ(s.arms[0].train.optimizer.name, "adamw");
  EXPECT_EQ(s.arms[0].train.schedule.name, "cosine");
  EXPECT_EQ(s.arms[0].train.schedule.warmup_steps, 10);
  EXPECT_EQ(s.arms[0].train.schedule.scale_base_batch, 256);
  j["train"]["schedule"]["name"] = "exponential";
  expect_error(j, "spec.train.schedule.name: unknown value \"exponential\"; expected one of \"constant\", \"step\", \"cosine\"");
}

// Here: a build without the backend, or one without a GPU; either way the message
// names the device and why.
TEST(Spec, CudaDeviceIsRefusedWhereThereIsNoGpu) {
  if (engine::device_available(engine::Device::cuda(0))) GTEST_SKIP() << "this machine has a GPU";
  json j = valid();
  j["arms"][0]["device"] = "cuda:0";
  expect_error(j, "spec.arms[0].device: device cuda:0 is not available: " +
                      std::string(engine::cuda_backend_built() ? "no CUDA device here: " : "this build of Quartet has no CUDA backend"));
}

TEST(Spec, EmptyArmsAreRefused) {
  json j = valid();
  j["arms"] = json::array();
  expect_error(j, "spec.arms: expected at least 1 entries");
}

TEST(Spec, ArmOverrideIsValidatedWithItsPath) {
  json j = valid();
  j["arms"][0]["train"] = {{"batch", -1}};
  expect_error(j, "spec.arms[0].train.batch: expected an integer ≥ 1 and ≤ 16777216, got -1");
}

TEST(Spec, CommentsAreAllowedInFiles) {
  const std::string path = ::testing::TempDir() + "/spec_comments.json";
  {
    std::ofstream out(path);
    out << "// a comment\n" << valid().dump(2) << "\n/* trailing */\n";
  }
  EXPECT_EQ(load_spec_file(path).arms.size(), 2u);
}

TEST(Spec, UnreadableOrInvalidFilesNameTheFile) {
  try {
    load_spec_file("/nonexistent/spec.json");
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/spec.json"), std::string::npos);
  }
  const std::string path = ::testing::TempDir() + "/spec_bad.json";
  {
    std::ofstream out(path);
    out << "{ \"name\": ";
  }
  // The syntax error says where and what, without the JSON library's error codes.
  try {
    load_spec_file(path);
    FAIL();
  } catch (const SpecError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path + ": not valid JSON: line 1, column 11: syntax error"), std::string::npos) << what;
    EXPECT_EQ(what.find("json.exception"), std::string::npos) << what;
  }
  // A folder (a run folder, say) is not a spec.
  try {
    load_spec_file(::testing::TempDir());
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find(": a folder, not an experiment file"), std::string::npos) << e.what();
  }
}

// A device set for the whole experiment is named as the experiment's field, not an arm's.
TEST(Spec, ExperimentDeviceErrorsNameTheExperimentsField) {
  if (engine::device_available(engine::Device::cuda(0))) GTEST_SKIP() << "this machine has a GPU";
  json j = valid();
  j["device"] = "cuda:0";
  expect_error(j, "spec.device: device cuda:0 is not available");
  j["device"] = "tpu";
  expect_error(j, "spec.device: ");
}

TEST(Schema, JsonSchemaDescribesEveryTopLevelField) {
  json s = spec_json_schema();
  EXPECT_EQ(s["type"], "object");
  for (const char* f : {"name", "workload", "seed", "train", "arms"}) EXPECT_TRUE(s["properties"].contains(f)) << f;
  EXPECT_EQ(s["properties"]["arms"]["items"]["properties"]["regime"]["enum"], json(trainers::regime_names()));
  EXPECT_EQ(s["properties"]["train"]["properties"]["batch"]["minimum"], 1.0);
}

// Each regime's fields reach the schema from the regime table: one if/then branch per
// regime with exactly its fields, their defaults and the required ones.
TEST(Schema, EachRegimesBranchHoldsItsTablesFields) {
  const json arm = spec_json_schema()["properties"]["arms"]["items"];
  EXPECT_EQ(arm["unevaluatedProperties"], false);
  const json& branches = arm["allOf"];
  ASSERT_EQ(branches.size(), trainers::regime_table().size());
  for (size_t i = 0; i < branches.size(); ++i) {
    const trainers::Regime& r = *trainers::regime_table()[i];
    EXPECT_EQ(branches[i]["if"]["properties"]["regime"]["const"], std::string(r.name()));
    const json& props = branches[i]["then"]["properties"];
    ASSERT_EQ(props.size(), r.fields().size()) << r.name();
    for (const trainers::Field& f : r.fields()) {
      ASSERT_TRUE(props.contains(f.name)) << r.name() << "." << f.name;
      EXPECT_EQ(props[f.name].value("default", json()), f.default_value) << r.name() << "." << f.name;
    }
  }
  const json& dp = branches[2]["then"];
  EXPECT_EQ(dp["properties"]["bucket_mb"]["default"], 25.0);
  EXPECT_EQ(dp["required"], json::array({"ranks"}));
}

TEST(Schema, CheckedInSchemaMatchesTheGeneratedOne) {
  std::ifstream in(std::string(QUARTET_SOURCE_DIR) + "/docs/spec.schema.json");
  ASSERT_TRUE(in) << "docs/spec.schema.json is missing; regenerate with: build/quartet schema > docs/spec.schema.json";
  EXPECT_EQ(json::parse(in), spec_json_schema()) << "regenerate with: build/quartet schema > docs/spec.schema.json";
}

TEST(Schema, SpecDocumentationListsEveryFieldAsGenerated) {
  std::ifstream in(std::string(QUARTET_SOURCE_DIR) + "/docs/spec.md");
  ASSERT_TRUE(in) << "docs/spec.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find(spec_markdown()), std::string::npos)
      << "docs/spec.md's field tables are stale; regenerate them with: build/quartet schema --markdown";
}

// What an arm may start is held to this machine's limits, named in the refusal, unless the
// arm overrides them; roles parse without (their launcher checked).
TEST(Spec, ArmsAreHeldToTheMachinesLimitsUnlessTheyOverrideThem) {
  const trainers::MachineLimits limits = trainers::MachineLimits::of_this_machine();
  json j = valid();
  j["arms"] = json::array({{{"name", "fed"}, {"regime", "federated"}, {"clients", limits.clients + 1}}});
  expect_error(j, "spec.arms[0].clients: " + std::to_string(limits.clients + 1) +
                      " virtual clients exceed this machine's limit of " + std::to_string(limits.clients));
  j["arms"][0]["clients"] = limits.processes + 8;
  j["arms"][0]["processes"] = limits.processes + 8;
  expect_error(j, "spec.arms[0].processes: " + std::to_string(limits.processes + 9) + " role processes");
  j["arms"][0]["override_limits"] = true;
  EXPECT_EQ(error_of(j), "");
  j["arms"][0]["override_limits"] = false;
  EXPECT_NO_THROW(parse_spec(j, /*machine_limits=*/false));

  j = valid();
  j["arms"][0] = {{"name", "ddp"}, {"regime", "data_parallel"}, {"ranks", 1024}};
  j["train"]["batch"] = 1024;
  expect_error(j, "spec.arms[0].ranks: 1024 rank processes on this host exceed this machine's limit of " +
                      std::to_string(limits.processes));
  j["arms"][0]["remote"] = json::array();
  for (int r = 1; r < 1024; ++r) j["arms"][0]["remote"].push_back("rank" + std::to_string(r));
  EXPECT_EQ(error_of(j), "");  // one rank here, the others elsewhere

  j = valid();
  j["threads"] = limits.threads + 1;
  expect_error(j, "spec.threads: " + std::to_string(limits.threads + 1) + " compute threads per process exceed");
  j["threads"] = 0;
  j["arms"][0]["threads"] = limits.threads + 1;
  expect_error(j, "spec.arms[0].threads: ");
  j["arms"][0]["threads"] = 100000;
  expect_error(j, "spec.arms[0].threads: expected an integer ≥ 0 and ≤ 1024");  // even overridden: not startable

  // The synthetic workload makes its samples up front: a quadrillion would be 788 PB.
  j = valid();
  j["workload"] = {{"name", "synthetic"}, {"model", "mlp"}, {"train_samples", int64_t{1000000000000000}}};
  expect_error(j, "spec.workload.train_samples: 788000000000403456 bytes of synthetic samples");
  j["workload"]["train_samples"] = 4096;
  EXPECT_EQ(error_of(j), "");
}

// Roles parse the spec as run again: parsing it once more changes nothing, for every arm
// of every ready experiment.
TEST(Spec, TheSpecAsRunParsesToItself) {
  for (const auto& e : std::filesystem::directory_iterator(std::string(QUARTET_SOURCE_DIR) + "/experiments")) {
    if (e.path().extension() != ".json" || model_file_not_written(e.path())) continue;
    const ExperimentSpec once = load_spec_file(e.path().string());
    const ExperimentSpec twice = parse_spec(once.json);
    EXPECT_EQ(twice.json, once.json) << e.path();
  }
}

json federated_arm() {
  json j = valid();
  j["arms"] = json::array({{{"name", "fed"}, {"regime", "federated"}, {"clients", 8}, {"fraction", 0.5},
                            {"partition", {{"kind", "dirichlet"}, {"alpha", 0.3}}}}});
  return j;
}

TEST(Spec, FederatedArmGetsItsDefaultsFilledIn) {
  const ExperimentSpec s = parse_spec(federated_arm());
  const json& a = s.json["arms"][0];
  EXPECT_EQ(a["rounds"], 1);
  EXPECT_EQ(a["local_epochs"], 1);
  EXPECT_EQ(a["strategy"], "fedavg");
  EXPECT_EQ(a["compress"], "none");
  EXPECT_EQ(a["link"], "loopback");
  EXPECT_EQ(a["partition"]["alpha"], 0.3);
  EXPECT_GE(a["processes"].get<int64_t>(), 1);
  EXPECT_LE(a["processes"].get<int64_t>(), 8);
  EXPECT_FALSE(s.json["arms"][0].contains("ranks"));
}

TEST(Spec, FederatedFieldsAreCheckedAndNamed) {
  json j = federated_arm();
  j["arms"][0]["fraction"] = 0.0;
  expect_error(j, "spec.arms[0].fraction");
  j = federated_arm();
  j["arms"][0]["min_clients"] = 9;
  expect_error(j, "spec.arms[0].min_clients: expected at most clients (8)");
  j = federated_arm();
  j["arms"][0]["partition"]["kind"] = "zipf";
  expect_error(j, "spec.arms[0].partition.kind");
  j = federated_arm();
  j["arms"][0]["partition"]["alpha"] = 0.0;
  expect_error(j, "spec.arms[0].partition.alpha");
  j = federated_arm();
  j["arms"][0]["strategy"] = "scaffold";
  expect_error(j, "spec.arms[0].strategy");
  j = federated_arm();
  j["arms"][0]["mu"] = 0.1;  // strategy fedavg
  expect_error(j, "spec.arms[0].mu: only the fedprox strategy");
  j = federated_arm();
  j["arms"][0]["link"] = "carrier-pigeon";
  expect_error(j, "spec.arms[0].link");
  j = federated_arm();
  j["arms"][0]["processes"] = 9;
  expect_error(j, "spec.arms[0].processes");
  j = valid();
  j["arms"][0]["clients"] = 4;  // a single arm
  expect_error(j, "spec.arms[0].clients: only the federated and split regimes take clients");
}

// FedOpt's server rate defaults to 0.1 (its steps are about eta per coordinate); FedAvgM's
// to 1.0; a rate given is kept.
TEST(Spec, FederatedServerLrDefaultsByStrategy) {
  json j = federated_arm();
  EXPECT_EQ(parse_spec(j).json["arms"][0]["server_lr"], 1.0);
  j["arms"][0]["strategy"] = "fedadam";
  const json a = parse_spec(j).json["arms"][0];
  EXPECT_EQ(a["server_lr"], 0.1);
  EXPECT_EQ(a["beta1"], 0.9);
  EXPECT_EQ(a["beta2"], 0.99);
  EXPECT_EQ(a["tau"], 1e-3);
  EXPECT_EQ(a["aggregator"], "mean");
  j["arms"][0]["server_lr"] = 0.5;
  EXPECT_EQ(parse_spec(j).json["arms"][0]["server_lr"], 0.5);
}

TEST(Spec, FederatedServerOptimizerAndAggregatorFieldsAreCheckedAndNamed) {
  json j = federated_arm();  // 8 clients, fraction 0.5: 4 a round
  j["arms"][0]["tau"] = 1e-6;  // strategy fedavg
  expect_error(j, "spec.arms[0].tau: only for the strategies fedadagrad, fedadam and fedyogi, this arm has strategy fedavg");
  j = federated_arm();
  j["arms"][0]["strategy"] = "fedadagrad";
  j["arms"][0]["beta2"] = 0.9;
  expect_error(j, "spec.arms[0].beta2: only for the strategies fedadam and fedyogi, this arm has strategy fedadagrad");
  j = federated_arm();
  j["arms"][0]["strategy"] = "fedyogi";
  j["arms"][0]["tau"] = 0.0;
  expect_error(j, "spec.arms[0].tau");
  j = federated_arm();
  j["arms"][0]["aggregator"] = "geometric_median";
  expect_error(j, "spec.arms[0].aggregator");
  j = federated_arm();
  j["arms"][0]["aggregator"] = "krum";  // krum_byzantine 1 needs more than 4
  expect_error(j, "spec.arms[0].krum_byzantine: 1 needs more than 2f + 2 = 4 clients a round, got 4");
  j["arms"][0]["krum_byzantine"] = 0;
  j["arms"][0]["krum_select"] = 5;
  expect_error(j, "spec.arms[0].krum_select: 5 exceeds n - f = 4");
  j["arms"][0]["krum_select"] = 4;
  EXPECT_NO_THROW(parse_spec(j));
  j = federated_arm();
  j["arms"][0]["krum_select"] = 2;  // aggregator mean
  expect_error(j, "spec.arms[0].krum_select: only for the krum aggregator, this arm has aggregator mean");
  j = federated_arm();
  j["arms"][0]["aggregator"] = "trimmed_mean";
  j["arms"][0]["trim_fraction"] = 0.5;  // drops 2 of 4 at each end
  expect_error(j, "spec.arms[0].trim_fraction: 0.5 drops 2 from each end of the round's 4 clients");
  j["arms"][0]["trim_fraction"] = 0.2;  // floor(0.8) = 0
  expect_error(j, "spec.arms[0].trim_fraction: 0.2 of the 4 clients a round asks trims none");
  j["arms"][0]["trim_fraction"] = 0.25;
  EXPECT_NO_THROW(parse_spec(j));
  j["arms"][0]["trim_fraction"] = 0.6;
  expect_error(j, "spec.arms[0].trim_fraction");
}

TEST(Spec, FederatedByzantineClientsAreFewerThanClients) {
  json j = federated_arm();
  j["arms"][0]["byzantine_clients"] = 8;
  expect_error(j, "spec.arms[0].byzantine_clients: expected fewer than clients (8), got 8");
  j = federated_arm();
  j["arms"][0]["byzantine_attack"] = "scale";  // no byzantine clients
  expect_error(j, "spec.arms[0].byzantine_attack: only for arms with byzantine_clients >= 1, this arm has byzantine_clients 0");
  j["arms"][0]["byzantine_clients"] = 2;
  j["arms"][0]["byzantine_attack"] = "noise";
  expect_error(j, "spec.arms[0].byzantine_attack");
  j["arms"][0]["byzantine_attack"] = "scale";
  j["arms"][0]["byzantine_scale"] = -4.0;
  const json a = parse_spec(j).json["arms"][0];
  EXPECT_EQ(a["byzantine_clients"], 2);
  EXPECT_EQ(a["byzantine_scale"], -4.0);
}

// DP-FedAvg's noise is scaled by the clip: noise without a clip is refused, as is a delta
// outside (0, 1), a negative clip, and a clip with an aggregator other than the mean.
TEST(Spec, FederatedDpFieldsAreCheckedTogether) {
  json j = federated_arm();
  j["arms"][0]["dp_noise_multiplier"] = 1.0;
  expect_error(j, "spec.arms[0].dp_noise_multiplier: noise needs a clip to scale it; give dp_clip > 0 as well");
  j["arms"][0]["dp_clip"] = 0.5;
  const ExperimentSpec s = parse_spec(j);
  EXPECT_EQ(s.json["arms"][0]["dp_delta"], 1e-5);
  j["arms"][0]["aggregator"] = "median";
  expect_error(j, "spec.arms[0].dp_clip: DP-FedAvg's noise is calibrated for aggregator mean, this arm has median");
  j["arms"][0]["aggregator"] = "mean";
  j["arms"][0]["dp_delta"] = 1.0;
  expect_error(j, "spec.arms[0].dp_delta: expected a number > 0 and < 1, got 1.0");
  j["arms"][0]["dp_delta"] = 0.0;
  expect_error(j, "spec.arms[0].dp_delta: expected a number > 0, got 0.0");
  j["arms"][0]["dp_clip"] = -1.0;
  expect_error(j, "spec.arms[0].dp_clip: expected a number ≥ 0, got -1.0");
}

TEST(Spec, FederatedRolesAreTheServerAndThePoolProcesses) {
  json j = federated_arm();
  j["arms"][0]["processes"] = 3;
  j["arms"][0]["remote"] = {"pool2"};
  const ExperimentSpec s = parse_spec(j);
  EXPECT_EQ(s.arms[0].remote, std::vector<std::string>{"pool2"});
  j["arms"][0]["remote"] = {"pool3"};
  expect_error(j, "\"pool3\" is not a role of the federated regime");
}

}  // namespace
TEST(Spec, SplitArmGetsItsDefaultsAndItsCutsAreStagesOfTheModel) {
  json j = valid();
  j["arms"] = json::array({{{"name", "sl"}, {"regime", "split"}, {"cut", "fc1"}}});
  const ExperimentSpec s = parse_spec(j);
  const json& a = s.json["arms"][0];
  EXPECT_EQ(a["clients"], 1);
  EXPECT_EQ(a["variant"], "vanilla");
  EXPECT_EQ(a["processes"], 1);
  EXPECT_EQ(a["partition"]["kind"], "iid");
  EXPECT_FALSE(a.contains("server_halves"));
  j["arms"][0]["variant"] = "ushaped";
  expect_error(j, "spec.arms[0].cut: the ushaped variant takes cuts: [a, b], not cut");
  j["arms"][0].erase("cut");
  j["arms"][0]["cuts"] = json::array({"fc1"});
  expect_error(j, "spec.arms[0].cuts: expected at least 2 entries");
  j["arms"][0]["variant"] = "vanilla";
  j["arms"][0]["cut"] = "fc1";
  j["arms"][0].erase("cuts");
  j["arms"][0]["server_halves"] = "shared";
  expect_error(j, "spec.arms[0].server_halves: only the splitfed variant");
  j["arms"][0].erase("server_halves");
  j["arms"][0]["train"] = {{"clip_grad_norm", 1.0}};
  expect_error(j, "spec.arms[0].train.clip_grad_norm: the split regime does not clip");
  j = valid();
  j["arms"][0]["cut"] = "fc1";
  expect_error(j, "spec.arms[0].cut: only the split regime takes cut, this arm is single");
}

}  // namespace quartet::runner

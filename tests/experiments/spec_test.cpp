#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "experiments/schema.h"
#include "experiments/spec.h"

namespace quartet::experiments {
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
  EXPECT_EQ(s.arms[1].micro_batches, 4);
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
  expect_error(j, "spec.train.batch: expected an integer ≥ 1, got \"lots\"");
}

TEST(Spec, ZeroOrNegativeBatchIsRefused) {
  json j = valid();
  j["train"]["batch"] = 0;
  expect_error(j, "spec.train.batch: expected an integer ≥ 1, got 0");
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
  expect_error(j, "only the accumulate regime takes micro_batches");
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

TEST(Spec, CudaDeviceIsRefusedOnACpuOnlyBuild) {
  json j = valid();
  j["arms"][0]["device"] = "cuda:0";
  expect_error(j, "spec.arms[0].device");
}

TEST(Spec, EmptyArmsAreRefused) {
  json j = valid();
  j["arms"] = json::array();
  expect_error(j, "spec.arms: expected at least 1 entries");
}

TEST(Spec, ArmOverrideIsValidatedWithItsPath) {
  json j = valid();
  j["arms"][0]["train"] = {{"batch", -1}};
  expect_error(j, "spec.arms[0].train.batch: expected an integer ≥ 1, got -1");
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
  EXPECT_THROW(load_spec_file(path), SpecError);
}

TEST(Schema, JsonSchemaDescribesEveryTopLevelField) {
  json s = to_json_schema(spec_schema(), "Quartet experiment");
  EXPECT_EQ(s["type"], "object");
  for (const char* f : {"name", "workload", "seed", "train", "arms"}) EXPECT_TRUE(s["properties"].contains(f)) << f;
  EXPECT_EQ(s["properties"]["arms"]["items"]["properties"]["regime"]["enum"], json({"single", "accumulate"}));
  EXPECT_EQ(s["properties"]["train"]["properties"]["batch"]["minimum"], 1.0);
}

TEST(Schema, CheckedInSchemaMatchesTheGeneratedOne) {
  std::ifstream in(std::string(QUARTET_SOURCE_DIR) + "/docs/spec.schema.json");
  ASSERT_TRUE(in) << "docs/spec.schema.json is missing; regenerate with: build/quartet schema > docs/spec.schema.json";
  EXPECT_EQ(json::parse(in), to_json_schema(spec_schema(), "Quartet experiment"))
      << "regenerate with: build/quartet schema > docs/spec.schema.json";
}

TEST(Schema, SpecDocumentationListsEveryFieldAsGenerated) {
  std::ifstream in(std::string(QUARTET_SOURCE_DIR) + "/docs/spec.md");
  ASSERT_TRUE(in) << "docs/spec.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find(to_markdown_table(spec_schema())), std::string::npos)
      << "docs/spec.md's field table is stale; regenerate it with: build/quartet schema --markdown";
}

}  // namespace
}  // namespace quartet::experiments

// The phantom workloads' spec fields: filled where they apply, refused elsewhere.

#include <gtest/gtest.h>

#include <string>

#include "runner/spec.h"
#include "runner/wiring.h"

namespace quartet::runner {
namespace {

using nlohmann::json;

json phantom() {
  return json::parse(R"({
    "name": "v",
    "workload": {"name": "phantom-mri-seg", "model": "unet3d"},
    "train": {"epochs": 1, "batch": 2},
    "arms": [{"name": "single", "regime": "single"}]
  })");
}

std::string error_of(json j) {
  try {
    parse_spec(std::move(j));
  } catch (const SpecError& e) {
    return e.what();
  }
  return "";
}

TEST(VolumeSpec, PhantomDefaultsAreFilledSoTheSpecAsRunSaysWhatRan) {
  const ExperimentSpec spec = parse_spec(phantom());
  const json& w = spec.json.at("workload");
  EXPECT_EQ(w.at("volumes"), 20);
  EXPECT_EQ(w.at("test_volumes"), 4);
  EXPECT_EQ(w.at("volume_size"), 32);
  EXPECT_EQ(w.at("patch"), 32);
  EXPECT_EQ(spec.workload.volumes, 20);
  EXPECT_EQ(spec.workload.patch, 32);
}

// Evaluation batches windows of every test volume: 13,500 windows of 32^3 in a pass of a
// 256^3 phantom arm would take 110 GB. Refused naming the field written, with the most
// that fits; a pass of a few windows is fine.
TEST(VolumeSpec, AnEvaluationThatCannotFitIsRefusedNamingEvalBatch) {
  json j = phantom();
  j["workload"]["volume_size"] = 256;
  j["train"]["eval_batch"] = 1000000;
  std::string msg = error_of(j);
  EXPECT_EQ(msg.rfind("spec.train.eval_batch: 13500 windows of 32^3 voxels a forward pass (of the 13500 the test "
                      "volumes hold) take ",
                      0),
            0u)
      << msg;
  EXPECT_NE(msg.find("allowed: eval_batch at most "), std::string::npos) << msg;
  j["arms"][0]["train"] = {{"eval_batch", 1000000}};
  msg = error_of(j);
  EXPECT_EQ(msg.rfind("spec.arms[0].train.eval_batch: ", 0), 0u) << msg;
  j["arms"][0]["train"] = {{"eval_batch", 2}};
  EXPECT_EQ(error_of(j), "");
  j["arms"][0]["override_limits"] = true;
  j["arms"][0]["train"] = {{"eval_batch", 1000000}};
  EXPECT_EQ(error_of(j), "");
}

TEST(VolumeSpec, FieldsReachTheWorkloadConfig) {
  json j = phantom();
  j["workload"]["volumes"] = 9;
  j["workload"]["test_volumes"] = 3;
  j["workload"]["volume_size"] = 64;
  j["workload"]["patch"] = 48;
  const workloads::WorkloadConfig c = workload_config(parse_spec(j));
  EXPECT_EQ(c.name, "phantom-mri-seg");
  EXPECT_EQ(c.volumes, 9);
  EXPECT_EQ(c.test_volumes, 3);
  EXPECT_EQ(c.volume_size, 64);
  EXPECT_EQ(c.patch, 48);
}

TEST(VolumeSpec, ImageWorkloadsAreNotGivenVolumeFields) {
  json j = json::parse(R"({"name": "t", "workload": {"name": "synthetic", "model": "mlp"},
                           "train": {"batch": 8}, "arms": [{"name": "s", "regime": "single"}]})");
  EXPECT_FALSE(parse_spec(j).json.at("workload").contains("volumes"));
  j["workload"]["patch"] = 16;
  EXPECT_EQ(error_of(j), "spec.workload.patch: only the volume workloads take patch, this one is synthetic");
}

TEST(VolumeSpec, BadSizesNameTheField) {
  json j = phantom();
  j["workload"]["patch"] = 30;
  EXPECT_EQ(error_of(j), "spec.workload.patch: unet3d pools twice, so the patch must be a multiple of 4, got 30");
  j = phantom();
  j["workload"]["volume_size"] = 300;
  EXPECT_NE(error_of(j).find("spec.workload.volume_size"), std::string::npos);
  j = phantom();
  j["workload"]["train_samples"] = 10;
  EXPECT_EQ(error_of(j), "spec.workload.train_samples: phantom-mri-seg counts volumes; use volumes and test_volumes");
  j = phantom();
  j["workload"]["volumes"] = 4000;
  j["workload"]["volume_size"] = 128;
  EXPECT_NE(error_of(j).find("exceed 2^30 voxels"), std::string::npos);
}

TEST(VolumeSpec, ModelsMustFitTheWorkload) {
  json j = phantom();
  j["workload"]["model"] = "resnet-mini";
  EXPECT_NE(error_of(j).find("spec.workload.model: model resnet-mini does not fit workload phantom-mri-seg"),
            std::string::npos);
  j = phantom();
  j["arms"][0]["model"] = "mlp";
  EXPECT_NE(error_of(j).find("spec.arms[0].model: model mlp does not fit workload phantom-mri-seg"),
            std::string::npos);
}

TEST(VolumeSpec, CheckpointIsOffUnlessTheTrainSettingsOrAnArmTurnItOn) {
  json j = phantom();
  j["arms"].push_back({{"name", "ckpt"}, {"regime", "single"}, {"train", {{"checkpoint", true}}}});
  const ExperimentSpec spec = parse_spec(j);
  EXPECT_FALSE(spec.arms[0].train.checkpoint);
  EXPECT_EQ(spec.json["arms"][0]["train"]["checkpoint"], false);
  EXPECT_TRUE(spec.arms[1].train.checkpoint);
  EXPECT_TRUE(role_context(spec.arms[1], "run", spec).config.checkpoint);
  EXPECT_FALSE(role_context(spec.arms[0], "run", spec).config.checkpoint);
  j["train"]["checkpoint"] = true;
  EXPECT_TRUE(parse_spec(j).arms[0].train.checkpoint);
}

TEST(VolumeSpec, ANonBooleanCheckpointNamesTheField) {
  json j = phantom();
  j["arms"][0]["train"] = {{"checkpoint", "yes"}};
  EXPECT_NE(error_of(j).find("spec.arms[0].train.checkpoint"), std::string::npos) << error_of(j);
}

json msd() {
  return json::parse(R"({
    "name": "m",
    "workload": {"name": "msd-folder", "model": "unet3d", "data_dir": "data/Task03_Liver"},
    "train": {"epochs": 1, "batch": 2},
    "arms": [{"name": "single", "regime": "single"}]
  })");
}

TEST(VolumeSpec, MsdFolderTakesTheFolderAndFillsTestVolumesAndPatch) {
  const ExperimentSpec spec = parse_spec(msd());
  const json& w = spec.json.at("workload");
  EXPECT_EQ(w.at("test_volumes"), 4);
  EXPECT_EQ(w.at("patch"), 32);
  EXPECT_FALSE(w.contains("volumes")) << "every case of the folder";
  EXPECT_FALSE(w.contains("volume_size"));
  const workloads::WorkloadConfig c = workload_config(spec);
  EXPECT_EQ(c.data_dir, "data/Task03_Liver");
  EXPECT_EQ(c.volumes, 0);
  EXPECT_EQ(c.test_volumes, 4);
  EXPECT_EQ(c.patch, 32);
}

TEST(VolumeSpec, MsdFolderFieldsNameTheField) {
  json j = msd();
  j["workload"]["data_dir"] = "";
  EXPECT_NE(error_of(j).find("spec.workload.data_dir: msd-folder needs the dataset's folder"), std::string::npos)
      << error_of(j);
  j = msd();
  j["workload"]["volume_size"] = 64;
  EXPECT_NE(error_of(j).find("spec.workload.volume_size: msd-folder's volumes keep their own sizes"),
            std::string::npos) << error_of(j);
  j = msd();
  j["workload"]["volumes"] = 4;
  EXPECT_NE(error_of(j).find("spec.workload.test_volumes: expected fewer than volumes (4)"), std::string::npos)
      << error_of(j);
  j = msd();
  j["workload"]["patch"] = 30;
  EXPECT_NE(error_of(j).find("spec.workload.patch: unet3d pools twice"), std::string::npos) << error_of(j);
}

TEST(VolumeSpec, AnArmsPatchReachesItsWorkloadConfigOnly) {
  json j = phantom();
  j["workload"]["volume_size"] = 64;
  j["arms"].push_back({{"name", "p64"}, {"regime", "single"}, {"patch", 64}});
  const ExperimentSpec spec = parse_spec(j);
  EXPECT_EQ(workload_config(spec, spec.arms[0]).patch, 32);
  EXPECT_EQ(workload_config(spec, spec.arms[1]).patch, 64);
  EXPECT_EQ(workload_config(spec).patch, 32);
}

TEST(VolumeSpec, AnArmsPatchIsCheckedLikeTheWorkloads) {
  json j = phantom();
  j["arms"][0]["patch"] = 64;
  EXPECT_EQ(error_of(j), "spec.arms[0].patch: expected at most volume_size (32), got 64");
  j["arms"][0]["patch"] = 30;
  EXPECT_EQ(error_of(j), "spec.arms[0].patch: unet3d pools twice, so the patch must be a multiple of 4, got 30");
  j = json::parse(R"({"name": "t", "workload": {"name": "synthetic", "model": "mlp"},
                      "train": {"batch": 8}, "arms": [{"name": "s", "regime": "single", "patch": 16}]})");
  EXPECT_EQ(error_of(j), "spec.arms[0].patch: only the volume workloads take patch, this one is synthetic");
}

TEST(VolumeSpec, ScannersDefaultToOneAndReachTheWorkloadConfig) {
  EXPECT_EQ(parse_spec(phantom()).json.at("workload").at("scanners"), 1);
  json j = phantom();
  j["workload"]["scanners"] = 3;
  EXPECT_EQ(workload_config(parse_spec(j)).scanners, 3);
}

TEST(VolumeSpec, ScannersAreForPhantomsOnlyAndWithinTheProfiles) {
  json j = phantom();
  j["workload"]["scanners"] = 5;
  EXPECT_NE(error_of(j).find("spec.workload.scanners"), std::string::npos) << error_of(j);
  j = json::parse(R"({"name": "t", "workload": {"name": "synthetic", "model": "mlp", "scanners": 2},
                      "train": {"batch": 8}, "arms": [{"name": "s", "regime": "single"}]})");
  EXPECT_EQ(error_of(j), "spec.workload.scanners: only the volume workloads take scanners, this one is synthetic");
  j = msd();
  j["workload"]["scanners"] = 2;
  EXPECT_NE(error_of(j).find("spec.workload.scanners: msd-folder's volumes come from their own scanners"),
            std::string::npos) << error_of(j);
}

json scanner_arm(json spec, int64_t clients) {
  spec["arms"] = json::array({{{"name", "fl"}, {"regime", "federated"}, {"clients", clients}, {"rounds", 1},
                               {"partition", {{"kind", "scanner"}}}}});
  return spec;
}

TEST(VolumeSpec, ScannerPartitionNeedsAScannerPerClient) {
  json j = phantom();
  j["workload"]["scanners"] = 4;
  EXPECT_EQ(error_of(scanner_arm(j, 4)), "");
  EXPECT_EQ(error_of(scanner_arm(j, 2)), "");
  EXPECT_NE(error_of(scanner_arm(j, 5)).find("spec.arms[0].clients: the scanner partition gives each client whole "
                                             "scanners (scanner s to client s mod clients), so at most "
                                             "workload.scanners (4), got 5"),
            std::string::npos) << error_of(scanner_arm(j, 5));
  j["workload"]["volumes"] = 6;
  EXPECT_NE(error_of(scanner_arm(j, 3)).find("2 training volumes for 3 clients"), std::string::npos)
      << error_of(scanner_arm(j, 3));
}

TEST(VolumeSpec, ScannerPartitionIsRefusedOnImages) {
  json j = json::parse(R"({"name": "t", "workload": {"name": "synthetic", "model": "mlp"},
                           "train": {"batch": 8}, "arms": []})");
  EXPECT_NE(error_of(scanner_arm(j, 2)).find("spec.arms[0].partition.kind: scanner splits a volume workload's "
                                             "volumes"),
            std::string::npos) << error_of(scanner_arm(j, 2));
}

}  // namespace
}  // namespace quartet::runner

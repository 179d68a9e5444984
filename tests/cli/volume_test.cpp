// Volumes through the `quartet` binary: the phantom workloads' spec fields, and unet3d on
// phantom CT under single, split (the cut in the encoder, skip tensors crossing it) and
// federated. Real processes, so labelled multirank and run serially.

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using cli_util::expect_exit2_with;
using cli_util::file_bytes;
using cli_util::quartet;
using cli_util::records_of;
using cli_util::Result;
using cli_util::safetensors_floats;

class VolumeCli : public cli_util::FolderTest {
 protected:
  VolumeCli() : FolderTest("cli_volume") {}

  fs::path write_spec(const json& j) {
    const fs::path p = dir_ / "spec.json";
    std::ofstream(p) << j.dump(2);
    return p;
  }

  // unet3d on 4 training and 2 held-out phantoms, 16^3 patches: 2 steps an epoch.
  static json phantom_spec() {
    return json::parse(R"({
      "name": "cli-volumes",
      "workload": {"name": "phantom-ct-seg", "model": "unet3d", "volumes": 6, "test_volumes": 2,
                   "volume_size": 32, "patch": 16},
      "seed": 3,
      "threads": 1,
      "train": {"epochs": 1, "batch": 2, "eval_batch": 8, "optimizer": {"name": "adam", "lr": 0.003}},
      "arms": [{"name": "single", "regime": "single"}]
    })");
  }

};

TEST_F(VolumeCli, PhantomSpecFieldsAreCheckedAndFilled) {
  json j = phantom_spec();
  j["workload"]["model"] = "cnn";
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_),
                    "spec.workload.model: model cnn does not fit workload phantom-ct-seg");
  j = phantom_spec();
  j["workload"]["patch"] = 48;
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_),
                    "spec.workload.patch: expected at most volume_size (32), got 48");
  j = phantom_spec();
  j["workload"]["test_volumes"] = 6;
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_), "spec.workload.test_volumes");
  j = json::parse(R"({"name": "x", "workload": {"name": "synthetic", "model": "mlp", "volumes": 4},
                      "train": {"batch": 8}, "arms": [{"name": "s", "regime": "single"}]})");
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_),
                    "spec.workload.volumes: only the volume workloads take volumes");
}

// One epoch of unet3d learns nothing yet: the run ends with a hint to give it more epochs,
// on the terminal and in summary.md.
TEST_F(VolumeCli, AnUntrainedSegmentationEndsWithAHintToTrainLonger) {
  const Result r =
      quartet({"run", write_spec(phantom_spec()).string(), "--out", (dir_ / "r").string(), "--progress=none"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const double dice = json::parse(file_bytes(dir_ / "r" / "single" / "summary.json"))["final_quality"].get<double>();
  ASSERT_LT(dice, 0.1) << "one epoch on 4 phantoms should not segment yet";
  for (const std::string& text : {r.out, file_bytes(dir_ / "r" / "summary.md")}) {
    EXPECT_NE(text.find("single: mean Dice "), std::string::npos) << text;
    EXPECT_NE(text.find("has not learnt to segment yet"), std::string::npos) << text;
    EXPECT_NE(text.find("give it more epochs"), std::string::npos) << text;
  }
}

// Split with one client and the cut after enc2 sends {e1, e2} each step, and the voxel
// labels: it equals single to float rounding. Federated averages two clients' volumes.
TEST_F(VolumeCli, Unet3dTrainsUnderSingleSplitAndFederated) {
  json j = phantom_spec();
  j["arms"] = json::array({{{"name", "single"}, {"regime", "single"}},
                           {{"name", "split-1"}, {"regime", "split"}, {"clients", 1}, {"cut", "enc2"}},
                           {{"name", "fed-2"}, {"regime", "federated"}, {"clients", 2}, {"rounds", 1},
                            {"processes", 1}, {"partition", {{"kind", "iid"}}}}});
  const Result r = quartet({"run", write_spec(j).string(), "--out", (dir_ / "r").string(), "--progress=none"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;

  const std::vector<json> single = records_of(dir_ / "r" / "single" / "roles" / "trainer.jsonl");
  ASSERT_EQ(single.size(), 2u);
  ASSERT_TRUE(single.back().contains("eval"));
  EXPECT_EQ(single.back()["eval"]["metric"], "dice");
  EXPECT_EQ(single.back()["eval"]["samples"], 2);

  const std::vector<float> a = safetensors_floats(dir_ / "r" / "single" / "final.safetensors");
  const std::vector<float> b = safetensors_floats(dir_ / "r" / "split-1" / "final.safetensors");
  ASSERT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  EXPECT_LT(worst, 1e-6);

  const std::vector<json> steps = records_of(dir_ / "r" / "split-1" / "roles" / "server.jsonl", "step");
  ASSERT_EQ(steps.size(), 1u);
  const json& turn = steps[0]["split"]["turns"][0];
  ASSERT_TRUE(turn["ok"].get<bool>()) << turn.dump();
  EXPECT_EQ(turn["cut"]["shapes"], json::parse("[[2, 16, 16, 16, 16], [2, 32, 8, 8, 8]]"));
  EXPECT_EQ(turn["cut"]["floats_per_sample"], 16 * 4096 + 32 * 512);
  // Two steps of two 16^3 patches of int32 voxel labels.
  EXPECT_GE(turn["traffic"]["labels"]["received"].get<int64_t>(), 2 * 2 * 4096 * 4);
  int64_t measured = 0;
  for (const auto& [kind, c] : turn["traffic"].items())
    measured += c["sent"].get<int64_t>() + c["received"].get<int64_t>();
  EXPECT_GE(measured, turn["analytic_bytes"].get<int64_t>());
  EXPECT_LT(double(measured - turn["analytic_bytes"].get<int64_t>()), 0.01 * turn["analytic_bytes"].get<double>());

  const json fed = json::parse(file_bytes(dir_ / "r" / "fed-2" / "summary.json"));
  EXPECT_EQ(fed["status"], "finished") << fed.dump();
}

}  // namespace

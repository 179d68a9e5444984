// Runs that went badly never say "finished": a client pool killed mid-run leaves the
// federated and split arms degraded (rounds and turns short of their clients), weights
// that are not numbers leave every arm diverged; both exit with code 3 and say why.

#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;
using cli_util::file_bytes;
using cli_util::quartet;
using cli_util::records_of;
using cli_util::wait_exit;
using nlohmann::json;

class WentBadly : public quartet::test_util::TempFolderTest {
 protected:
  WentBadly() : TempFolderTest("went_badly") {}

  fs::path write_spec(const json& j) {
    const fs::path p = dir_ / "spec.json";
    std::ofstream(p) << j.dump(2);
    return p;
  }

  static json spec(const json& arm, const json& train) {
    return {{"name", "bad"},
            {"workload", {{"name", "synthetic"}, {"model", "mlp"}, {"train_samples", 256}, {"test_samples", 64}}},
            {"seed", 3},
            {"threads", 1},
            {"train", train},
            {"arms", json::array({arm})}};
  }
};

// Every round asks all four clients. A client pool1 was training when killed is left out
// of that round (the kill may also land between its clients); pool0 trains all four in
// the rounds after. Losing a role makes the arm degraded either way.
TEST_F(WentBadly, AFederatedArmThatLostAPoolEndsDegraded) {
  const json j = spec({{"name", "fed"}, {"regime", "federated"}, {"clients", 4}, {"processes", 2},
                       {"fraction", 1.0}, {"deadline_s", 2.0}, {"rounds", 200}},
                      {{"batch", 16}, {"optimizer", {{"lr", 0.05}}}});
  const fs::path run = dir_ / "run";
  const pid_t launcher = cli_util::run_and_kill_role(write_spec(j), run, "fed", "pool1", dir_ / "launcher.log");
  ASSERT_GT(launcher, 0) << file_bytes(dir_ / "launcher.log");
  ASSERT_EQ(wait_exit(launcher), 3) << file_bytes(dir_ / "launcher.log");
  const json summary = json::parse(file_bytes(run / "fed" / "summary.json"));
  EXPECT_EQ(summary["status"], "degraded");
  EXPECT_EQ(summary["steps"], 200);  // every round still ran
  EXPECT_NE(summary["problem"].get<std::string>().find("lost role pool1"), std::string::npos) << summary.dump();
  const std::vector<json> steps = records_of(run / "fed" / "roles" / "server.jsonl", "step");
  for (const json& s : steps) {
    if (s.contains("degraded")) {
      EXPECT_NE(s["degraded"].get<std::string>().find("3 of 4 sampled clients"), std::string::npos) << s.dump();
    }
  }
  const json& last = steps.back();
  EXPECT_EQ(last["round"]["completed"], 4) << last.dump();
  EXPECT_EQ(last["round"]["pools"][0]["clients"].size(), 4u) << last.dump();
  EXPECT_EQ(json::parse(file_bytes(run / "run.json"))["status"], "degraded");
  EXPECT_NE(file_bytes(dir_ / "launcher.log").find("pool1"), std::string::npos);
}

// Clients take turns; pool1's lose theirs after the kill, the others go on.
TEST_F(WentBadly, ASplitArmThatLostAPoolEndsDegraded) {
  const json j = spec({{"name", "sl"}, {"regime", "split"}, {"clients", 4}, {"processes", 2}, {"cut", "fc1"}},
                      {{"epochs", 1000}, {"batch", 32}, {"optimizer", {{"lr", 0.05}, {"momentum", 0.9}}}});
  const fs::path run = dir_ / "run";
  const pid_t launcher = cli_util::run_and_kill_role(write_spec(j), run, "sl", "pool1", dir_ / "launcher.log");
  ASSERT_GT(launcher, 0) << file_bytes(dir_ / "launcher.log");
  ASSERT_EQ(wait_exit(launcher), 3) << file_bytes(dir_ / "launcher.log");
  const json summary = json::parse(file_bytes(run / "sl" / "summary.json"));
  EXPECT_EQ(summary["status"], "degraded");
  const std::vector<json> steps = records_of(run / "sl" / "roles" / "server.jsonl", "step");
  ASSERT_EQ(steps.size(), 1000u * 4);  // a record per turn, lost turns included
  int lost = 0;
  for (const json& s : steps) {
    const json& t = s["split"]["turns"][0];
    if (t["ok"].get<bool>()) continue;
    ++lost;
    EXPECT_EQ(t["client"].get<int64_t>() % 2, 1) << t.dump();  // pool1 hosts clients 1 and 3
    EXPECT_NE(s["degraded"].get<std::string>().find("lost its turn"), std::string::npos) << s.dump();
  }
  EXPECT_GT(lost, 0);
  EXPECT_EQ(summary["degraded_steps"], lost);
  EXPECT_TRUE(steps.back().contains("eval"));
  EXPECT_NE(file_bytes(run / "sl" / "roles" / "server.log").find("loses its turn"), std::string::npos);
}

// Initial weights that are all 3e38 (finite, so they load): the first layer's sums
// overflow to infinity, every loss is NaN in every arm, which ends diverged.
TEST_F(WentBadly, WeightsThatOverflowLeaveEveryArmDiverged) {
  const json train = {{"epochs", 1}, {"batch", 32}, {"max_steps", 3}};
  json j = spec({{"name", "single"}, {"regime", "single"}}, train);
  j["arms"].push_back({{"name", "ddp"}, {"regime", "data_parallel"}, {"ranks", 2}});
  j["arms"].push_back({{"name", "fed"}, {"regime", "federated"}, {"clients", 2}, {"rounds", 2}});
  const fs::path spec_file = write_spec(j);
  ASSERT_EQ(quartet({"run", spec_file.string(), "--out", (dir_ / "clean").string(), "--progress=none"}, dir_).code, 0);
  std::string bytes = file_bytes(dir_ / "clean" / "init.safetensors");
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), sizeof header);
  const float huge = 3e38f;
  ASSERT_GT(bytes.size(), 8 + header);
  for (uint64_t at = 8 + header; at + sizeof huge <= bytes.size(); at += sizeof huge)
    std::memcpy(bytes.data() + at, &huge, sizeof huge);
  std::ofstream(dir_ / "huge.safetensors", std::ios::binary) << bytes;

  const cli_util::Result r = quartet({"run", spec_file.string(), "--out", (dir_ / "run").string(), "--init",
                                      (dir_ / "huge.safetensors").string(), "--progress=none"},
                                     dir_);
  EXPECT_EQ(r.code, 3) << r.out;
  for (const char* arm : {"single", "ddp", "fed"}) {
    const json summary = json::parse(file_bytes(dir_ / "run" / arm / "summary.json"));
    EXPECT_EQ(summary["status"], "diverged") << arm;
    EXPECT_NE(summary["problem"].get<std::string>().find("non-finite loss"), std::string::npos) << summary.dump();
  }
  EXPECT_EQ(json::parse(file_bytes(dir_ / "run" / "run.json"))["status"], "diverged");
  EXPECT_NE(r.out.find("diverged"), std::string::npos) << r.out;
}

// One NaN in the initial weights: refused as --init is read, naming the tensor, before
// any folder is made (a NaN weight gave exit 0 and garbage out).
TEST_F(WentBadly, NanInitialWeightsAreRefusedNamingTheTensor) {
  const json j = spec({{"name", "single"}, {"regime", "single"}}, {{"epochs", 1}, {"batch", 32}, {"max_steps", 1}});
  const fs::path spec_file = write_spec(j);
  ASSERT_EQ(quartet({"run", spec_file.string(), "--out", (dir_ / "clean").string(), "--progress=none"}, dir_).code, 0);
  std::string bytes = file_bytes(dir_ / "clean" / "init.safetensors");
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), sizeof header);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bytes.data() + 8 + header, &nan, sizeof nan);
  std::ofstream(dir_ / "nan.safetensors", std::ios::binary) << bytes;
  const cli_util::Result r = quartet({"run", spec_file.string(), "--out", (dir_ / "run").string(), "--init",
                                      (dir_ / "nan.safetensors").string()},
                                     dir_);
  cli_util::expect_exit2_with(r, "that are not finite (NaN or infinite; the first at index 0 is nan)");
  EXPECT_NE(r.out.find("--init " + (dir_ / "nan.safetensors").string() + ": "), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "run"));
  // eval reads weights the same way.
  cli_util::expect_exit2_with(
      quartet({"eval", (dir_ / "nan.safetensors").string(), "--workload", "synthetic", "--model", "mlp"}, dir_),
      "that are not finite");
}

}  // namespace

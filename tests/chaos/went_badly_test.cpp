// Runs that went badly never say "finished": a client pool killed mid-run leaves the
// federated and split arms degraded (rounds and turns short of their clients), or failed
// when what they trained is less than half the plan; weights whose sums overflow leave
// every arm diverged (3); weights that are not numbers are refused as they are read (2).

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

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
  // The share of the plan it trained is said wherever the status is.
  EXPECT_GE(summary["trained_share"].get<double>(), 0.5) << summary.dump();
  EXPECT_NE(summary["problem"].get<std::string>().find(" planned samples ("), std::string::npos) << summary.dump();
  EXPECT_NE(file_bytes(dir_ / "launcher.log").find("fed: degraded: trained "), std::string::npos)
      << file_bytes(dir_ / "launcher.log");
  EXPECT_NE(file_bytes(run / "summary.md").find("degraded ("), std::string::npos);
}

// The arm's only pool is killed after round 1: every later round finds no client. The
// arm trained a tenth of the samples it planned: failed, saying so, not "degraded".
TEST_F(WentBadly, AFederatedArmThatTrainedLessThanHalfItsPlanFails) {
  const json j = spec({{"name", "fed"}, {"regime", "federated"}, {"clients", 2}, {"processes", 1},
                       {"fraction", 1.0}, {"deadline_s", 2.0}, {"rounds", 10}},
                      {{"batch", 16}, {"optimizer", {{"lr", 0.05}}}});
  const fs::path run = dir_ / "run";
  const pid_t launcher = cli_util::run_and_kill_role(write_spec(j), run, "fed", "pool0", dir_ / "launcher.log");
  ASSERT_GT(launcher, 0) << file_bytes(dir_ / "launcher.log");
  ASSERT_EQ(cli_util::wait_exit_within(launcher, std::chrono::seconds(300)), 1) << file_bytes(dir_ / "launcher.log");
  const json summary = json::parse(file_bytes(run / "fed" / "summary.json"));
  EXPECT_EQ(summary["status"], "failed");
  EXPECT_EQ(summary["planned_samples"], 10 * 256);  // two clients of 128 samples, all of them each round
  EXPECT_LT(summary["trained_share"].get<double>(), 0.5);
  EXPECT_NE(summary["error"].get<std::string>().find("trained " + summary["samples"].dump() + " of 2560 planned "
                                                     "samples ("),
            std::string::npos)
      << summary.dump();
  EXPECT_NE(summary["error"].get<std::string>().find("less than 50 % of the plan"), std::string::npos)
      << summary.dump();
  EXPECT_EQ(json::parse(file_bytes(run / "run.json"))["status"], "failed");
}

// The server dies while a pool is stopped (SIGSTOP: it cannot act on SIGTERM): the arm
// fails and the pool is killed once it has had its grace; the run ends, it does not wait.
TEST_F(WentBadly, ARoleThatDoesNotStopWhenAskedIsKilled) {
  const json j = spec({{"name", "fed"}, {"regime", "federated"}, {"clients", 4}, {"processes", 2},
                       {"fraction", 1.0}, {"rounds", 100000}},
                      {{"batch", 16}, {"optimizer", {{"lr", 0.05}}}});
  const fs::path run = dir_ / "run";
  const fs::path log = dir_ / "launcher.log";
  const pid_t launcher = cli_util::start_quartet({"run", write_spec(j).string(), "--out", run.string(),
                                                  "--progress=none"},
                                                 log);
  ASSERT_FALSE(
      cli_util::wait_for_line(run / "fed" / "roles" / "server.jsonl", "\"type\":\"step\"", std::chrono::seconds(120))
          .empty())
      << file_bytes(log);
  const pid_t pool = cli_util::find_role_process(run, "pool1"), server = cli_util::find_role_process(run, "server");
  ASSERT_GT(pool, 0);
  ASSERT_GT(server, 0);
  kill(pool, SIGSTOP);
  kill(server, SIGKILL);
  EXPECT_EQ(cli_util::wait_exit_within(launcher, std::chrono::seconds(120)), 1) << file_bytes(log);
  EXPECT_NE(kill(pool, 0), 0) << "the stopped pool outlived its run";
  EXPECT_EQ(json::parse(file_bytes(run / "fed" / "summary.json"))["status"], "failed");
  EXPECT_NE(file_bytes(log).find("role server failed"), std::string::npos) << file_bytes(log);
}

// Out of tasks: the run's user may start only n processes and threads (RLIMIT_NPROC), so
// a fork or a thread somewhere fails with EAGAIN: the launcher's own spawn of a role, or
// the federated server's thread for a pool's connection, which left the server waiting
// for that pool (run.json "running" until killed). Whichever fails, the arm ends at once,
// failed, naming it. The limit binds only a user other than root: the run is that of
// nobody (setpriv), which needs root.
TEST_F(WentBadly, OutOfTasksEveryArmEndsPromptlyNamingTheCause) {
  if (::geteuid() != 0) GTEST_SKIP() << "running the run as a user of its own (setpriv) needs root";
  json j = spec({{"name", "fed"}, {"regime", "federated"}, {"clients", 4}, {"processes", 2}, {"rounds", 3}},
                {{"batch", 32}});
  j["override_limits"] = true;  // the spec's own check would refuse these limits first
  const fs::path spec_file = write_spec(j);
  fs::permissions(dir_, fs::perms::all);
  int failed = 0;
  for (int n = 8; n <= 18; n += 2) {
    const fs::path run = dir_ / ("run" + std::to_string(n)), log = dir_ / ("run" + std::to_string(n) + ".log");
    const pid_t pid = cli_util::start_quartet(
        {"run", spec_file.string(), "--out", run.string(), "--progress=none"}, log, {},
        {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "prlimit",
         "--nproc=" + std::to_string(n) + ":" + std::to_string(n)});
    const int code = cli_util::wait_exit_within(pid, std::chrono::seconds(90));
    const std::string out = file_bytes(log);
    ASSERT_NE(code, -1) << "ulimit -u " << n << ": the run hung\n" << out;
    if (code == 0) continue;
    ++failed;
    EXPECT_EQ(code, 1) << n << ": " << out;
    EXPECT_NE(out.find("Resource temporarily unavailable"), std::string::npos) << n << ": " << out;
    if (fs::exists(run / "run.json")) {
      EXPECT_EQ(json::parse(file_bytes(run / "run.json"))["status"], "failed") << n << ": " << out;
    }
  }
  EXPECT_GT(failed, 0) << "no limit was tight enough to fail a spawn";
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

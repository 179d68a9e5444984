// `quartet launch` end to end: one process per rank, told its rank the way srun and
// torchrun tell it (the variables set by hand), on 127.0.0.1 and across two network
// namespaces; the weights equal single's. Real processes: labelled multirank, run serially.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli/cli_util.h"
#include "tests/text_corpus.h"
#include "tests/transport/multirank/namespaces.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using cli_util::expect_exit2_with;
using cli_util::file_bytes;
using cli_util::safetensors_floats;
using cli_util::start_quartet;
using cli_util::wait_exit_within;

void write_file_atomically(const fs::path& p, const std::string& text) {
  const fs::path tmp = p.string() + ".tmp";
  std::ofstream(tmp) << text;
  fs::rename(tmp, p);
}

// `env` unsetting every launcher variable, then setting `vars` (NAME=value): the test's
// own environment (a CI job under Slurm) must not leak into the ranks.
std::vector<std::string> only(const std::vector<std::string>& vars) {
  std::vector<std::string> cmd{"env"};
  for (const char* v : {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODELIST", "SLURM_JOB_NODELIST",
                        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "RANK",
                        "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
                        "QUARTET_TOKEN", "QUARTET_GLOO_HOST", "QUARTET_GLOO_IFACE"})
    cmd.insert(cmd.end(), {"-u", v});
  cmd.insert(cmd.end(), vars.begin(), vars.end());
  return cmd;
}

// A port nobody listens on now, below the OS's ephemeral range (as a cluster's
// MASTER_PORT is): a rank's own outgoing connections never take it before rank 0 does.
int unused_port() {
  int low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low;
  for (int port = 20000 + ::getpid() % 5000; port < low; ++port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    if (free) return port;
  }
  ADD_FAILURE() << "no free port below " << low;
  return 0;
}

class Launch : public cli_util::FolderTest {
 protected:
  Launch() : FolderTest("launch") {}
  void SetUp() override {
    FolderTest::SetUp();
    fs::create_directories(dir_ / "logs");
    token_file_ = dir_ / "token";
  }

  // single, and a 4-rank data_parallel arm over backend_ with the same global batch;
  // written once (ranks read it while later ones start).
  fs::path spec() {
    if (fs::exists(dir_ / "spec.json")) return dir_ / "spec.json";
    json j = json::parse(R"({
      "name": "launch",
      "workload": {"name": "synthetic", "model": "mlp", "train_samples": 256, "test_samples": 64},
      "seed": 3, "threads": 1,
      "train": {"epochs": 1, "batch": 32, "optimizer": {"lr": 0.05, "momentum": 0.9}},
      "arms": [{"name": "single", "regime": "single"},
               {"name": "ddp", "regime": "data_parallel", "ranks": 4, "bucket_mb": 0.1}]
    })");
    j["arms"][1]["backend"] = backend_;
    j["workload"]["train_samples"] = train_samples_;
    write_file_atomically(dir_ / "spec.json", j.dump(2));
    return dir_ / "spec.json";
  }

  // Starts rank `rank` with `vars` (NAME=value) behind `prefix` (a namespace).
  pid_t start_rank(int rank, std::vector<std::string> vars, const std::vector<std::string>& prefix = {}) {
    vars.push_back("QUARTET_THREADS=1");
    std::vector<std::string> all = prefix;
    for (const std::string& a : only(vars)) all.push_back(a);
    const fs::path work = dir_ / "work" / std::to_string(rank);
    return start_quartet({"launch", spec().string(), "--arm", arm_, "--out", (dir_ / "run").string(), "--token-file",
                          token_file_.string(), "--work-dir", work.string(), "--join-timeout", "300"},
                         log(rank), {}, all);
  }
  fs::path log(int rank) const { return dir_ / "logs" / std::to_string(rank); }
  std::string arm_ = "ddp";  // the arm start_rank() launches
  std::string backend_ = "gloo";
  int train_samples_ = 256;
  fs::path token_file_;  // dir_/token unless a test says otherwise

  // Waits for every rank (a hang fails, its processes killed) and checks the run.
  void expect_ranks_train_like_single(const std::vector<pid_t>& ranks) {
    for (size_t r = 0; r < ranks.size(); ++r)
      EXPECT_EQ(wait_exit_within(ranks[r], std::chrono::seconds(600)), 0) << file_bytes(log(static_cast<int>(r)));
    const json summary = json::parse(file_bytes(dir_ / "run" / "ddp" / "summary.json"));
    EXPECT_EQ(summary["status"], "finished");
    EXPECT_EQ(summary["processes"], 4);
    for (const char* role : {"rank0", "rank1", "rank2", "rank3"})
      EXPECT_TRUE(fs::exists(dir_ / "run" / "ddp" / "roles" / (std::string(role) + ".jsonl"))) << role;
    // single alone, for its weights: data_parallel equals it up to float summation order.
    json j = json::parse(file_bytes(spec()));
    j["arms"] = json::array({j["arms"][0]});
    std::ofstream(dir_ / "single.json") << j.dump();
    const cli_util::Result r = cli_util::quartet(
        {"run", (dir_ / "single.json").string(), "--out", (dir_ / "single").string(), "--progress=none"}, dir_);
    ASSERT_EQ(r.code, 0) << r.out;
    const std::vector<float> a = safetensors_floats(dir_ / "single" / "single" / "final.safetensors");
    const std::vector<float> b = safetensors_floats(dir_ / "run" / "ddp" / "final.safetensors");
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GT(a.size(), 200000u);
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
    EXPECT_LT(worst, 2e-6);
  }

  // Launches `arm` (its ranks given by `vars(rank)`) of a small text-lm experiment on
  // `model` and checks its final weights against single's, run on its own.
  void launch_text_arm_like_single(const std::string& model, const json& arm, int ranks,
                                   const std::function<std::vector<std::string>(int)>& vars) {
    quartet::test_util::write_word_corpus(dir_ / "corpus", 3);
    json j = {{"name", "launch-" + arm["name"].get<std::string>()},
              {"workload",
               {{"name", "text-lm"}, {"model", model}, {"data_dir", (dir_ / "corpus").string()}, {"test_samples", 4}}},
              {"seed", 3},
              {"threads", 1},
              {"train", {{"epochs", 1}, {"batch", 8}, {"max_steps", 2}, {"eval_batch", 4},
                         {"optimizer", {{"lr", 0.05}, {"momentum", 0.9}}}}},
              {"arms", json::array({{{"name", "single"}, {"regime", "single"}}, arm})}};
    write_file_atomically(dir_ / "spec.json", j.dump(2));
    arm_ = arm["name"];
    std::vector<pid_t> started;
    for (int r = ranks - 1; r >= 0; --r) started.insert(started.begin(), start_rank(r, vars(r)));
    for (size_t r = 0; r < started.size(); ++r)
      EXPECT_EQ(wait_exit_within(started[r], std::chrono::seconds(600)), 0) << file_bytes(log(static_cast<int>(r)));
    const json summary = json::parse(file_bytes(dir_ / "run" / arm_ / "summary.json"));
    EXPECT_EQ(summary["status"], "finished");
    EXPECT_EQ(summary["processes"], ranks);
    j["arms"] = json::array({j["arms"][0]});
    std::ofstream(dir_ / "single.json") << j.dump();
    const cli_util::Result r = cli_util::quartet(
        {"run", (dir_ / "single.json").string(), "--out", (dir_ / "single").string(), "--progress=none"}, dir_);
    ASSERT_EQ(r.code, 0) << r.out;
    const double worst = cli_util::max_abs_diff(dir_ / "single" / "single" / "final.safetensors",
                                                dir_ / "run" / arm_ / "final.safetensors");
    EXPECT_GE(worst, 0.0) << "the weights differ in count";
    EXPECT_LT(worst, 2e-6);
  }
};

TEST_F(Launch, SlurmStyleRanksOnOneHostTrainLikeSingle) {
  const std::string port = std::to_string(unused_port());
  std::vector<pid_t> ranks;
  // Rank 0 last: the others wait for its coordinator and its token file.
  for (int r = 3; r >= 0; --r)
    ranks.insert(ranks.begin(), start_rank(r, {"SLURM_PROCID=" + std::to_string(r), "SLURM_NTASKS=4",
                                               "SLURM_LOCALID=" + std::to_string(r), "SLURM_NODELIST=127.0.0.[1-3]",
                                               "MASTER_PORT=" + port}));
  expect_ranks_train_like_single(ranks);
  EXPECT_NE(file_bytes(log(2)).find("slurm rank 2 of 4 (local rank 2), coordinator 127.0.0.1:" + port),
            std::string::npos)
      << file_bytes(log(2));
}

TEST_F(Launch, TorchrunStyleRanksOnOneHostTrainLikeSingle) {
  const std::string port = std::to_string(unused_port());
  std::vector<pid_t> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.push_back(start_rank(r, {"RANK=" + std::to_string(r), "WORLD_SIZE=4", "LOCAL_RANK=" + std::to_string(r),
                                   "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port}));
  expect_ranks_train_like_single(ranks);
}

// Two hosts (network namespaces) with two ranks each, told by Slurm's variables: the node
// list's first host, 192.0.2.1, runs rank 0 and the coordinator on the default port. No
// QUARTET_GLOO_HOST: each rank's Gloo listens where its host reaches the coordinator from
// (rank 0 and 1, local to it, on the address ranks 2 and 3 dialled).
TEST_F(Launch, SlurmStyleTwoHostsWithTwoRanksEachTrainLikeSingle) {
  using quartet::transport::testing::TwoNamespaces;
  TwoNamespaces ns;
  if (const std::string why = ns.create(); !why.empty()) GTEST_SKIP() << why;
  std::vector<pid_t> ranks;
  for (int r = 0; r < 4; ++r) {
    const bool first = r < 2;
    ranks.push_back(start_rank(
        r,
        {"SLURM_PROCID=" + std::to_string(r), "SLURM_NTASKS=4", "SLURM_LOCALID=" + std::to_string(r % 2),
         "SLURM_NODELIST=192.0.2.[1-2]"},
        {"ip", "netns", "exec", first ? ns.a() : ns.b()}));
  }
  expect_ranks_train_like_single(ranks);
}

// The same two hosts told by torchrun's variables: MASTER_ADDR names rank 0's host.
TEST_F(Launch, TorchrunStyleTwoHostsWithTwoRanksEachTrainLikeSingle) {
  using quartet::transport::testing::TwoNamespaces;
  TwoNamespaces ns;
  if (const std::string why = ns.create(); !why.empty()) GTEST_SKIP() << why;
  std::vector<pid_t> ranks;
  for (int r = 0; r < 4; ++r) {
    const bool first = r < 2;
    ranks.push_back(start_rank(r,
                               {"RANK=" + std::to_string(r), "WORLD_SIZE=4", "LOCAL_RANK=" + std::to_string(r % 2),
                                "MASTER_ADDR=192.0.2.1"},
                               {"ip", "netns", "exec", first ? ns.a() : ns.b()}));
  }
  expect_ranks_train_like_single(ranks);
}

// `command` under /bin/sh, its exit code and output.
cli_util::Result shell(const std::string& command) {
  cli_util::Result r;
  FILE* f = ::popen(command.c_str(), "r");
  if (!f) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) r.out.append(buf, n);
  const int status = ::pclose(f);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// 32 random hex digits.
std::string random_token() {
  std::random_device rd;
  char buf[33];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

// Why Open MPI's mpirun cannot start processes here ("" when it can): not installed,
// another MPI's mpirun, or one that fails to start a trivial job.
std::string mpirun_unusable() {
  const cli_util::Result version = shell("mpirun --version 2>&1");
  if (version.code != 0) return "no mpirun on PATH (Debian: openmpi-bin)";
  if (version.out.find("Open MPI") == std::string::npos) return "mpirun is not Open MPI's: " + version.out;
  const cli_util::Result trial = shell(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 mpirun --oversubscribe -np 2 true 2>&1");
  if (trial.code != 0) return "mpirun -np 2 true fails here: " + trial.out;
  return "";
}

// Open MPI's own mpirun starts the 4 ranks, which learn their ranks from OMPI_COMM_WORLD_*.
TEST_F(Launch, MpirunRanksOnOneHostTrainLikeSingle) {
  if (const std::string why = mpirun_unusable(); !why.empty()) GTEST_SKIP() << why;
  const std::string port = std::to_string(unused_port());
  fs::create_directories(dir_ / "work");
  // Every rank gets the same arguments: the per-rank work folders are the default ones, in
  // the folder mpirun starts them in.
  std::vector<std::string> prefix = only({"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                                          "QUARTET_THREADS=1", "QUARTET_TOKEN=" + random_token()});
  prefix.insert(prefix.begin() + 1, {"-C", (dir_ / "work").string()});
  prefix.insert(prefix.end(), {"mpirun", "--oversubscribe", "-np", "4", "-x", "QUARTET_TOKEN", "-x", "QUARTET_THREADS"});
  const pid_t p = start_quartet({"launch", spec().string(), "--arm", "ddp", "--out", (dir_ / "run").string(),
                                 "--coordinator", "127.0.0.1:" + port, "--join-timeout", "300"},
                                log(0), {}, prefix);
  expect_ranks_train_like_single({p});
  const std::string out = file_bytes(log(0));
  EXPECT_NE(out.find("openmpi rank 3 of 4 (local rank 3), coordinator 127.0.0.1:" + port), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir_ / "work" / "quartet-role-ddp-rank3")) << out;
}

// The same two hosts with backend "hierarchical": the ranks find their hosts by host key
// (the network namespace tells them apart), reduce within each over shared memory and
// between the leaders, ranks 0 and 2, over Gloo; the weights equal single's, and only the
// leaders send between hosts: 2(H-1)/H * S = S for H = 2.
TEST_F(Launch, SlurmStyleTwoHostsHierarchicalTrainsLikeSingle) {
  using quartet::transport::testing::TwoNamespaces;
  TwoNamespaces ns;
  if (const std::string why = ns.create(); !why.empty()) GTEST_SKIP() << why;
  backend_ = "hierarchical";
  std::vector<pid_t> ranks;
  for (int r = 0; r < 4; ++r) {
    const bool first = r < 2;
    ranks.push_back(start_rank(
        r,
        {"SLURM_PROCID=" + std::to_string(r), "SLURM_NTASKS=4", "SLURM_LOCALID=" + std::to_string(r % 2),
         "SLURM_NODELIST=192.0.2.[1-2]", std::string("QUARTET_GLOO_HOST=192.0.2.") + (first ? "1" : "2")},
        {"ip", "netns", "exec", first ? ns.a() : ns.b()}));
  }
  expect_ranks_train_like_single(ranks);
  for (int r = 0; r < 4; ++r) {
    const std::vector<json> steps =
        cli_util::records_of(dir_ / "run" / "ddp" / "roles" / ("rank" + std::to_string(r) + ".jsonl"), "step");
    ASSERT_FALSE(steps.empty()) << r;
    const json& comm = steps.back()["comm"];
    const int64_t s = 235146 * 4;  // the mlp's gradients
    EXPECT_EQ(comm["levels"]["intra"]["bytes"].get<int64_t>(), s + s) << "rank " << r;  // all-reduce of 2, broadcast
    EXPECT_EQ(comm["levels"]["inter"]["bytes"].get<int64_t>(), r % 2 == 0 ? s : 0) << "rank " << r;
  }
}

TEST_F(Launch, WorldSizeOtherThanTheArmsRanksExitsWith2NamingBoth) {
  const pid_t p = start_rank(0, {"RANK=0", "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1"});
  const int code = wait_exit_within(p, std::chrono::seconds(120));
  expect_exit2_with({code, file_bytes(log(0))}, "WORLD_SIZE: 3 processes, but arm ddp has 4 ranks");
  EXPECT_FALSE(fs::exists(dir_ / "run"));
}

TEST_F(Launch, NoRankVariablesExitWith2NamingThem) {
  const pid_t p = start_rank(0, {});
  const int code = wait_exit_within(p, std::chrono::seconds(120));
  expect_exit2_with({code, file_bytes(log(0))}, "SLURM_PROCID (srun), OMPI_COMM_WORLD_RANK (mpirun) and RANK");
}

TEST_F(Launch, BadSlurmNodeListExitsWith2NamingIt) {
  const pid_t p = start_rank(1, {"SLURM_PROCID=1", "SLURM_NTASKS=4", "SLURM_NODELIST=node[01-"});
  const int code = wait_exit_within(p, std::chrono::seconds(120));
  expect_exit2_with({code, file_bytes(log(1))}, "SLURM_NODELIST: \"node[01-\" has a '[' without its ']'");
}

TEST_F(Launch, ArmOfAnotherRegimeIsRefusedNamingWhatIsSupported) {
  const pid_t p = start_quartet({"launch", spec().string(), "--arm", "single"}, log(0), {},
                                only({"RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=127.0.0.1"}));
  const int code = wait_exit_within(p, std::chrono::seconds(120));
  expect_exit2_with({code, file_bytes(log(0))},
                    "--arm single: its regime is single; quartet launch runs data_parallel, tensor_parallel, "
                    "context_parallel, expert_parallel and mesh arms only");
}

TEST_F(Launch, RankWithoutATokenExitsWith2NamingWhereItComesFrom) {
  const pid_t p = start_quartet({"launch", spec().string(), "--arm", "ddp"}, log(1), {},
                                only({"RANK=1", "WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1"}));
  const int code = wait_exit_within(p, std::chrono::seconds(120));
  expect_exit2_with({code, file_bytes(log(1))}, "QUARTET_TOKEN: not set and no --token-file");
}

// A SLURM_NODELIST standing for ten billion hosts (two bracket ranges) is refused at once,
// exit 2 naming the variable, without expanding it.
TEST_F(Launch, ANodeListOfBillionsOfHostsExitsWith2Quickly) {
  const auto started = std::chrono::steady_clock::now();
  const pid_t p = start_quartet({"launch", spec().string(), "--arm", "ddp", "--token-file", token_file_.string()},
                                log(0), {},
                                only({"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_LOCALID=0",
                                      "SLURM_NODELIST=n[0-100000]x[0-100000]"}));
  const int code = wait_exit_within(p, std::chrono::seconds(60));
  expect_exit2_with({code, file_bytes(log(0))}, "SLURM_NODELIST");
  EXPECT_NE(file_bytes(log(0)).find("stands for more than 100000 hosts"), std::string::npos) << file_bytes(log(0));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30)) << "the list was expanded";
  EXPECT_FALSE(fs::exists(dir_ / "run"));
}

// A rank started twice: the second is refused as a twin of the connected one, which no
// retry mends; it exits 2 saying so after its grace (30 s), not after its join timeout.
TEST_F(Launch, ARankStartedTwiceExitsWith2) {
  const std::string port = std::to_string(unused_port());
  auto vars = [&](int r) {
    return std::vector<std::string>{"RANK=" + std::to_string(r), "WORLD_SIZE=4", "LOCAL_RANK=" + std::to_string(r),
                                    "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port};
  };
  const pid_t rank0 = start_rank(0, vars(0));
  const pid_t rank1 = start_rank(1, vars(1));
  // The twin starts once rank 1 has joined: rank 0's coordinator is up (its run folder
  // is made after it listens), and rank 1 tries every half second.
  ASSERT_FALSE(cli_util::wait_for_line(dir_ / "run" / "run.json", "running", std::chrono::seconds(120)).empty())
      << file_bytes(log(0));
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const std::vector<std::string> twin_vars = vars(1);
  std::vector<std::string> all;
  for (const std::string& a : only(twin_vars)) all.push_back(a);
  const pid_t twin = start_quartet({"launch", spec().string(), "--arm", "ddp", "--token-file", token_file_.string(),
                                    "--work-dir", (dir_ / "twin").string(), "--join-timeout", "300"},
                                   dir_ / "logs" / "twin", {}, all);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(wait_exit_within(twin, std::chrono::seconds(120)), 2) << file_bytes(dir_ / "logs" / "twin");
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(100));
  const std::string out = file_bytes(dir_ / "logs" / "twin");
  EXPECT_NE(out.find("is already connected from"), std::string::npos) << out;
  EXPECT_NE(out.find("another process runs this role"), std::string::npos) << out;
  kill(rank0, SIGINT);
  kill(rank1, SIGTERM);
  wait_exit_within(rank0, std::chrono::seconds(120));
  wait_exit_within(rank1, std::chrono::seconds(120));
}

// A second rank 0 on the same address cannot take the coordinator's port: it exits 2
// naming the address, before it makes its run folder, and the first run is untouched.
TEST_F(Launch, ASecondRankZeroExitsWith2AndLeavesNoFolder) {
  const std::vector<std::string> vars = {"RANK=0", "WORLD_SIZE=4", "LOCAL_RANK=0", "MASTER_ADDR=127.0.0.1",
                                         "MASTER_PORT=" + std::to_string(unused_port())};
  const pid_t first = start_rank(0, vars);
  ASSERT_FALSE(cli_util::wait_for_line(dir_ / "run" / "run.json", "running", std::chrono::seconds(120)).empty())
      << file_bytes(log(0));
  std::vector<std::string> all;
  for (const std::string& a : only(vars)) all.push_back(a);
  const pid_t second =
      start_quartet({"launch", spec().string(), "--arm", "ddp", "--out", (dir_ / "run2").string(), "--token-file",
                     token_file_.string(), "--work-dir", (dir_ / "second").string(), "--join-timeout", "300"},
                    dir_ / "logs" / "second", {}, all);
  const int code = wait_exit_within(second, std::chrono::seconds(60));
  expect_exit2_with({code, file_bytes(dir_ / "logs" / "second")}, "127.0.0.1:" + vars.back().substr(12));
  EXPECT_FALSE(fs::exists(dir_ / "run2")) << file_bytes(dir_ / "logs" / "second");
  EXPECT_TRUE(fs::exists(dir_ / "run" / "run.json"));
  kill(first, SIGINT);
  wait_exit_within(first, std::chrono::seconds(120));
}

// No coordinator comes: the rank says it keeps trying, then gives up at its deadline.
TEST_F(Launch, RankThatCannotReachTheCoordinatorRetriesUntilItsDeadline) {
  const std::string port = std::to_string(unused_port());
  const pid_t p = start_quartet({"launch", spec().string(), "--arm", "ddp", "--join-timeout", "3"}, log(1), {},
                                only({"RANK=1", "WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port,
                                      "QUARTET_TOKEN=abc"}));
  EXPECT_EQ(wait_exit_within(p, std::chrono::seconds(120)), 1);
  const std::string out = file_bytes(log(1));
  EXPECT_NE(out.find("role rank1 cannot join the coordinator at 127.0.0.1:" + port + " yet"), std::string::npos)
      << out;
  EXPECT_NE(out.find("trying again for up to 3 s"), std::string::npos) << out;
  EXPECT_NE(out.find("gave up joining the coordinator at 127.0.0.1:" + port + " after 3 s"), std::string::npos)
      << out;
}

// A port held open as torchrun's agent holds MASTER_PORT (its store) while its workers run.
class PortHolder {
 public:
  explicit PortHolder(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
  }
  ~PortHolder() { close(fd_); }

 private:
  int fd_;
};

// Rank r of n as `torchrun --nproc-per-node n --master-port PORT --no-python CMD` (PyTorch
// 2.15) sets the variables, every one of them (each worker printed `env`).
std::vector<std::string> torchrun_variables(int r, int n, const std::string& addr, int port) {
  const std::string rs = std::to_string(r), ns = std::to_string(n);
  return {"GROUP_RANK=0", "GROUP_WORLD_SIZE=1", "LOCAL_RANK=" + rs, "LOCAL_WORLD_SIZE=" + ns,
          "MASTER_ADDR=" + addr, "MASTER_PORT=" + std::to_string(port), "OMP_NUM_THREADS=1", "RANK=" + rs,
          "ROLE_NAME=default", "ROLE_RANK=" + rs, "ROLE_WORLD_SIZE=" + ns,
          "TORCHELASTIC_ERROR_FILE=/tmp/torchelastic_x/none_y/attempt_0/" + rs + "/error.json",
          "TORCHELASTIC_MAX_RESTARTS=0", "TORCHELASTIC_RESTART_COUNT=0", "TORCHELASTIC_RUN_ID=none",
          "TORCHELASTIC_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT", "TORCHELASTIC_USE_AGENT_STORE=True",
          "TORCH_NCCL_ASYNC_ERROR_HANDLING=1", "WORLD_SIZE=" + ns};
}

// torchrun's agent listens on MASTER_PORT itself; the ranks meet on the next port, with
// no flag of ours, and rank 0's join hint names the host they were given.
TEST_F(Launch, TorchrunsVariablesWithItsAgentOnMasterPortTrainLikeSingle) {
  const int port = unused_port();
  PortHolder agent(port);
  std::vector<pid_t> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(start_rank(r, torchrun_variables(r, 4, "localhost", port)));
  expect_ranks_train_like_single(ranks);
  const std::string next = "localhost:" + std::to_string(port + 1);
  EXPECT_NE(file_bytes(log(1)).find("torchrun rank 1 of 4 (local rank 1), coordinator " + next +
                                    " (MASTER_PORT + 1: torchrun's agent listens on MASTER_PORT)"),
            std::string::npos)
      << file_bytes(log(1));
  EXPECT_NE(file_bytes(log(0)).find("quartet role --coordinator " + next + " --arm ddp --role rank3"),
            std::string::npos)
      << file_bytes(log(0));
}

// context_parallel's ranks split every sequence of gpt-mini and pass key/value blocks
// between them: launched by torchrun's variables, two ranks train like single.
TEST_F(Launch, TorchrunStyleContextParallelRanksTrainLikeSingle) {
  const std::string port = std::to_string(unused_port());
  launch_text_arm_like_single("gpt-mini",
                              {{"name", "cp"}, {"regime", "context_parallel"}, {"ranks", 2}, {"backend", "gloo"}}, 2,
                              [&](int r) {
                                return std::vector<std::string>{"RANK=" + std::to_string(r), "WORLD_SIZE=2",
                                                                "LOCAL_RANK=" + std::to_string(r),
                                                                "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port};
                              });
}

// expert_parallel's ranks hold two of gpt-moe-dropless's four experts each and send the
// tokens to them by all-to-all: launched by Slurm's variables, they train like single.
TEST_F(Launch, SlurmStyleExpertParallelRanksTrainLikeSingle) {
  const std::string port = std::to_string(unused_port());
  launch_text_arm_like_single("gpt-moe-dropless",
                              {{"name", "ep"}, {"regime", "expert_parallel"}, {"ranks", 2}, {"backend", "gloo"}}, 2,
                              [&](int r) {
                                return std::vector<std::string>{"SLURM_PROCID=" + std::to_string(r), "SLURM_NTASKS=2",
                                                                "SLURM_LOCALID=" + std::to_string(r),
                                                                "SLURM_NODELIST=127.0.0.1", "MASTER_PORT=" + port};
                              });
}

// A mesh of dp 2 x tp 2 x pp 2: eight processes, each with its coordinates from its rank.
TEST_F(Launch, TorchrunStyleMeshRanksTrainLikeSingle) {
  const std::string port = std::to_string(unused_port());
  launch_text_arm_like_single(
      "gpt-mini", {{"name", "mesh"}, {"regime", "mesh"}, {"mesh", {{"dp", 2}, {"tp", 2}, {"pp", 2}}}, {"backend", "gloo"}},
      8, [&](int r) {
        return std::vector<std::string>{"RANK=" + std::to_string(r), "WORLD_SIZE=8", "LOCAL_RANK=" + std::to_string(r),
                                        "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port};
      });
}

// mpirun inside a Slurm job (sbatch -n4 running mpirun -np 4): every rank also inherits the
// batch step's SLURM_PROCID=0; Open MPI's variables win, and the job's node list names
// rank 0's host.
TEST_F(Launch, MpirunInsideSlurmReadsOpenMpisVariablesAndTrainsLikeSingle) {
  const std::string port = std::to_string(unused_port());
  std::vector<pid_t> ranks;
  for (int r = 0; r < 4; ++r) {
    const std::string rs = std::to_string(r);
    ranks.push_back(start_rank(
        r, {"OMPI_COMM_WORLD_LOCAL_RANK=" + rs, "OMPI_COMM_WORLD_LOCAL_SIZE=4", "OMPI_COMM_WORLD_NODE_RANK=" + rs,
            "OMPI_COMM_WORLD_RANK=" + rs, "OMPI_COMM_WORLD_SIZE=4", "OMPI_UNIVERSE_SIZE=4",
            "SLURM_JOB_NODELIST=localhost", "SLURM_LOCALID=0", "SLURM_NNODES=1", "SLURM_NODEID=0",
            "SLURM_NODELIST=localhost", "SLURM_NPROCS=4", "SLURM_NTASKS=4", "SLURM_PROCID=0", "MASTER_PORT=" + port}));
  }
  expect_ranks_train_like_single(ranks);
  EXPECT_NE(file_bytes(log(2)).find("openmpi rank 2 of 4 (local rank 2), coordinator localhost:" + port +
                                    "; also set, not read: SLURM_PROCID (slurm)"),
            std::string::npos)
      << file_bytes(log(2));
}

// A rank killed mid-training: every survivor names it, and so does the arm's summary.
TEST_F(Launch, RankKilledMidTrainingIsNamedByEverySurvivorAndTheSummary) {
  train_samples_ = 16000;  // 500 steps: longer than the test waits
  const std::string port = std::to_string(unused_port());
  std::vector<pid_t> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.push_back(start_rank(r, {"RANK=" + std::to_string(r), "WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1",
                                   "MASTER_PORT=" + port, "QUARTET_GLOO_TIMEOUT_S=60"}));
  // Wait for training (rank 2's records reach rank 0's folder), then kill rank 2.
  const fs::path records = dir_ / "run" / "ddp" / "roles" / "rank2.jsonl";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (cli_util::records_of(records, "step").size() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GE(cli_util::records_of(records, "step").size(), 3u) << file_bytes(log(0));
  kill(ranks[2], SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  // Rank 0's coordinator saw rank 2 vanish; ranks 1 and 3 asked it who went away.
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(wait_exit_within(ranks[r], std::chrono::seconds(120)), 1) << file_bytes(log(r));
    EXPECT_NE(file_bytes(log(r)).find(r == 0 ? "role rank2 vanished" : "role rank2 ("), std::string::npos)
        << "rank " << r << ":\n" << file_bytes(log(r));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - killed, std::chrono::seconds(30));
  cli_util::wait_exit(ranks[2]);
  const json summary = json::parse(file_bytes(dir_ / "run" / "ddp" / "summary.json"));
  EXPECT_EQ(summary["status"], "failed");
  EXPECT_EQ(summary["error"].get<std::string>().rfind("role rank2 vanished", 0), 0u) << summary["error"];
}

// --token-file in folders that do not exist yet: rank 0 makes them (owner only). A rank 0
// that fails says so in the file, and the ranks waiting for it stop within seconds.
TEST_F(Launch, TokenFileFoldersAreMadeAndARank0ThatFailsStopsTheOthers) {
  token_file_ = dir_ / "no" / "such" / "token";
  const std::string port = std::to_string(unused_port());
  auto vars = [&](int r) {
    return std::vector<std::string>{"RANK=" + std::to_string(r), "WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1",
                                    "MASTER_PORT=" + port};
  };
  std::vector<pid_t> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(start_rank(r, vars(r)));
  expect_ranks_train_like_single(ranks);
  EXPECT_EQ(fs::status(token_file_.parent_path()).permissions() & fs::perms::all, fs::perms::owner_all);

  // Again into the same --out, which rank 0 refuses: the others, waiting for a token, stop.
  fs::remove(token_file_);
  for (int r = 1; r < 4; ++r) ranks[static_cast<size_t>(r)] = start_rank(r, vars(r));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(wait_exit_within(start_rank(0, vars(0)), std::chrono::seconds(60)), 2) << file_bytes(log(0));
  for (int r = 1; r < 4; ++r) {
    EXPECT_EQ(wait_exit_within(ranks[static_cast<size_t>(r)], std::chrono::seconds(10)), 1) << file_bytes(log(r));
    EXPECT_NE(file_bytes(log(r)).find("role rank" + std::to_string(r) + " stops: rank 0 failed"), std::string::npos)
        << file_bytes(log(r));
  }
}

}  // namespace

// End-to-end tests of the `quartet` binary: exit codes and messages for bad input,
// determinism, interruption and resume. They start real processes (the launcher and
// its roles), so they are labelled multirank and run serially.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Result {
  int code = -1;
  std::string out;  // stdout and stderr together
};

// Runs `quartet args...` with stdout+stderr captured to a file; waits for it.
Result quartet(const std::vector<std::string>& args, const fs::path& dir) {
  const fs::path log = dir / ("out-" + std::to_string(::getpid()) + ".txt");
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<std::string> all{QUARTET_BINARY};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(QUARTET_BINARY, argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(log);
  std::stringstream s;
  s << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), s.str()};
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("cli_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write_spec(const json& j, const std::string& name = "spec.json") {
    const fs::path p = dir_ / name;
    std::ofstream(p) << j.dump(2);
    return p;
  }

  static json small_spec() {
    return json::parse(R"({
      "name": "cli",
      "workload": {"name": "synthetic", "model": "mlp", "train_samples": 256, "test_samples": 64},
      "seed": 3,
      "threads": 1,
      "train": {"epochs": 2, "batch": 32, "optimizer": {"lr": 0.05, "momentum": 0.9}},
      "arms": [{"name": "single", "regime": "single"},
               {"name": "acc", "regime": "accumulate", "micro_batches": 2}]
    })");
  }

  fs::path dir_;
};

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void expect_exit2_with(const Result& r, const std::string& fragment) {
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(fragment), std::string::npos) << "output: " << r.out << "\nexpected: " << fragment;
}

TEST_F(Cli, ValidateAcceptsAGoodSpec) {
  const Result r = quartet({"validate", write_spec(small_spec()).string()}, dir_);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("ok"), std::string::npos);
}

TEST_F(Cli, BadSpecsExitWithCode2AndOneMessageNamingTheField) {
  json j = small_spec();
  j["train"]["batch"] = 0;
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_), "spec.train.batch: expected an integer ≥ 1");
  j = small_spec();
  j["arms"][1]["micro_batches"] = 3;
  expect_exit2_with(quartet({"run", write_spec(j).string(), "--out", (dir_ / "r").string()}, dir_),
                    "does not divide the batch 32");
  EXPECT_FALSE(fs::exists(dir_ / "r")) << "a refused spec must not create a run folder";
  j = small_spec();
  j["arms"][0]["regime"] = "quantum";
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_), "expected one of \"single\", \"accumulate\"");
  j = small_spec();
  j["workload"].erase("model");
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_), "spec.workload.model: missing");
}

TEST_F(Cli, MissingDatasetFolderNamesTheDebianPackage) {
  json j = small_spec();
  j["workload"] = {{"name", "fashion-mnist"}, {"model", "mlp"}, {"data_dir", (dir_ / "nowhere").string()}};
  expect_exit2_with(quartet({"run", write_spec(j).string(), "--out", (dir_ / "r").string()}, dir_),
                    "dataset-fashion-mnist");
}

TEST_F(Cli, TruncatedIdxFileIsNamed) {
  const fs::path data = dir_ / "idx";
  fs::create_directories(data);
  auto write_u32 = [](std::ofstream& out, uint32_t v) {
    const unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                                static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
    out.write(reinterpret_cast<const char*>(b), 4);
  };
  for (const char* split : {"train", "t10k"}) {
    std::ofstream img(data / (std::string(split) + "-images-idx3-ubyte"), std::ios::binary);
    write_u32(img, 0x803);
    write_u32(img, 10);
    write_u32(img, 28);
    write_u32(img, 28);
    img << std::string(100, 'x');  // far fewer than 10 * 784 pixel bytes
    std::ofstream lab(data / (std::string(split) + "-labels-idx1-ubyte"), std::ios::binary);
    write_u32(lab, 0x801);
    write_u32(lab, 10);
    lab << std::string(10, '\1');
  }
  json j = small_spec();
  j["workload"] = {{"name", "fashion-mnist"}, {"model", "mlp"}, {"data_dir", data.string()}};
  expect_exit2_with(quartet({"run", write_spec(j).string(), "--out", (dir_ / "r").string()}, dir_),
                    "train-images-idx3-ubyte");
}

TEST_F(Cli, ExistingOutputFolderIsNeverOverwritten) {
  fs::create_directories(dir_ / "taken");
  std::ofstream(dir_ / "taken" / "keep.txt") << "mine";
  expect_exit2_with(quartet({"run", write_spec(small_spec()).string(), "--out", (dir_ / "taken").string()}, dir_),
                    "exists");
  EXPECT_EQ(file_bytes(dir_ / "taken" / "keep.txt"), "mine");
}

TEST_F(Cli, UnknownSubcommandOrOptionExitsWith2) {
  EXPECT_EQ(quartet({"frobnicate"}, dir_).code, 2);
  EXPECT_EQ(quartet({"run", "--no-such-flag"}, dir_).code, 2);
}

TEST_F(Cli, RunWritesResultsAndTheSameSpecGivesIdenticalWeights) {
  const fs::path spec = write_spec(small_spec());
  const Result a = quartet({"run", spec.string(), "--out", (dir_ / "a").string(), "--progress=none"}, dir_);
  ASSERT_EQ(a.code, 0) << a.out;
  const Result b = quartet({"run", spec.string(), "--out", (dir_ / "b").string(), "--progress=none"}, dir_);
  ASSERT_EQ(b.code, 0) << b.out;
  for (const char* arm : {"single", "acc"}) {
    EXPECT_TRUE(fs::exists(dir_ / "a" / arm / "summary.json"));
    EXPECT_TRUE(fs::exists(dir_ / "a" / arm / "roles" / "trainer.jsonl"));
    EXPECT_EQ(file_bytes(dir_ / "a" / arm / "final.safetensors"), file_bytes(dir_ / "b" / arm / "final.safetensors"))
        << arm;
  }
  EXPECT_EQ(file_bytes(dir_ / "a" / "init.safetensors"), file_bytes(dir_ / "b" / "init.safetensors"));
  const std::string table = file_bytes(dir_ / "a" / "summary.md");
  EXPECT_NE(table.find("| single | single | finished |"), std::string::npos) << table;
  EXPECT_NE(table.find("| acc | accumulate | finished |"), std::string::npos) << table;
  const json run = json::parse(file_bytes(dir_ / "a" / "run.json"));
  EXPECT_EQ(run["status"], "finished");
  const json spec_json = json::parse(file_bytes(dir_ / "a" / "spec.json"));
  EXPECT_TRUE(spec_json["environment"].contains("cpu"));
}

TEST_F(Cli, JsonlProgressStreamsEventsInOrder) {
  json j = small_spec();
  j["arms"] = json::array({j["arms"][0]});
  const Result r = quartet({"run", write_spec(j).string(), "--out", (dir_ / "r").string(), "--progress=jsonl"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<std::string> events;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    events.push_back(json::parse(line)["event"]);
  }
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.front(), "run_started");
  EXPECT_EQ(events[1], "arm_started");
  EXPECT_EQ(events.back(), "run_finished");
  EXPECT_NE(std::find(events.begin(), events.end(), "step"), events.end());
  EXPECT_NE(std::find(events.begin(), events.end(), "evaluation"), events.end());
  EXPECT_NE(std::find(events.begin(), events.end(), "arm_finished"), events.end());
}

// Ctrl-C during the second arm: the first arm's results stay, the run is marked
// interrupted; --resume finishes it with the same weights as an uninterrupted run.
TEST_F(Cli, InterruptedRunKeepsFinishedArmsAndResumeMatchesAnUninterruptedRun) {
  json j = small_spec();
  j["train"]["epochs"] = 100;  // the second arm runs long after its first checkpoint
  j["arms"][0]["train"] = {{"epochs", 1}};
  const fs::path spec = write_spec(j);

  const Result whole = quartet({"run", spec.string(), "--out", (dir_ / "whole").string(), "--progress=none"}, dir_);
  ASSERT_EQ(whole.code, 0) << whole.out;

  const fs::path run = dir_ / "cut";
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open((dir_ / "cut.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(QUARTET_BINARY, QUARTET_BINARY, "run", spec.c_str(), "--out", run.c_str(), "--progress=none", nullptr);
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(3);
  while (!fs::exists(run / "acc" / "checkpoint.safetensors") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << file_bytes(dir_ / "cut.log");
  EXPECT_EQ(WEXITSTATUS(status), 130) << file_bytes(dir_ / "cut.log");

  const json state = json::parse(file_bytes(run / "run.json"));
  EXPECT_EQ(state["status"], "interrupted");
  EXPECT_EQ(state["arms"]["single"], "finished");
  EXPECT_EQ(state["arms"]["acc"], "interrupted");
  EXPECT_TRUE(fs::exists(run / "single" / "final.safetensors"));
  EXPECT_NE(file_bytes(run / "summary.md").find("| single | single | finished |"), std::string::npos);
  EXPECT_FALSE(fs::exists(run / "acc" / "final.safetensors"));

  const Result resumed = quartet({"run", "--resume", run.string(), "--progress=none"}, dir_);
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_EQ(json::parse(file_bytes(run / "run.json"))["status"], "finished");
  EXPECT_EQ(file_bytes(run / "acc" / "final.safetensors"), file_bytes(dir_ / "whole" / "acc" / "final.safetensors"));
  EXPECT_EQ(file_bytes(run / "single" / "final.safetensors"), file_bytes(dir_ / "whole" / "single" / "final.safetensors"));
}

}  // namespace

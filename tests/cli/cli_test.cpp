// End-to-end tests of the `quartet` binary: exit codes and messages for bad input,
// determinism, interruption and resume. They start real processes (the launcher and
// its roles), so they are labelled multirank and run serially.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli/cli_util.h"
#include "tests/transport/multirank/namespaces.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using cli_util::expect_exit2_with;
using cli_util::file_bytes;
using cli_util::find_role_process;
using cli_util::quartet;
using cli_util::records_of;
using cli_util::Result;
using cli_util::safetensors_floats;
using cli_util::start_quartet;
using cli_util::wait_exit;
using cli_util::wait_for_line;

class Cli : public cli_util::FolderTest {
 protected:
  Cli() : FolderTest("cli") {}

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

};

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

// A typo of a command is named, with the command it is nearest to, as git does.
TEST_F(Cli, AMistypedCommandIsNamedWithTheNearestOne) {
  expect_exit2_with(quartet({"runn", "x"}, dir_), "unknown command runn; did you mean run?");
  expect_exit2_with(quartet({"reprot", "x"}, dir_), "unknown command reprot; did you mean report?");
  const Result far = quartet({"frobnicate"}, dir_);
  EXPECT_NE(far.out.find("unknown command frobnicate"), std::string::npos) << far.out;
  EXPECT_EQ(far.out.find("did you mean"), std::string::npos) << far.out;
}

TEST_F(Cli, ListModelsSaysWhichWorkloadsEachModelFits) {
  const Result r = quartet({"list", "models"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const size_t unet = r.out.find("  unet3d ");
  ASSERT_NE(unet, std::string::npos) << r.out;
  const size_t fits = r.out.find("workloads: ", unet);
  ASSERT_NE(fits, std::string::npos) << r.out;
  const std::string line = r.out.substr(fits, r.out.find('\n', fits) - fits);
  EXPECT_NE(line.find("phantom-ct-seg"), std::string::npos) << line;
  EXPECT_EQ(line.find("fashion-mnist"), std::string::npos) << line;
}

// On a terminal 80 columns wide (a pseudo-terminal from script(1), as a person's): every
// redraw of the bar stays on its line, the closing table fits, and the run ends with its
// folder and the commands that show it.
TEST_F(Cli, OnAn80ColumnTerminalTheBarAndTheTableFit) {
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "script(1) (util-linux) is not installed";
  const fs::path spec = write_spec(small_spec());
  const fs::path out = dir_ / "tty.txt";
  const std::string command = "stty cols 80 rows 24; exec " + std::string(QUARTET_BINARY) + " run " + spec.string() +
                              " --out " + (dir_ / "r").string();
  const std::string shell = "script -qec '" + command + "' /dev/null > " + out.string() + " 2>&1 </dev/null";
  ASSERT_EQ(std::system(shell.c_str()), 0) << file_bytes(out);
  const std::string text = file_bytes(out);
  auto columns = [](const std::string& line) {
    size_t n = 0;
    for (unsigned char c : line) n += (c & 0xC0) != 0x80;
    return n;
  };
  // The bar's redraws: "\r", the line, "erase to its end".
  size_t redraws = 0;
  for (size_t at = text.find('\r'); at != std::string::npos; at = text.find('\r', at + 1)) {
    const size_t clear = text.find("\x1b[K", at);
    if (clear == std::string::npos || text.find_first_of("\r\n", at + 1) < clear) continue;
    ++redraws;
    EXPECT_LT(columns(text.substr(at + 1, clear - at - 1)), 80u) << text.substr(at + 1, clear - at - 1);
  }
  EXPECT_GT(redraws, 4u) << text;  // the bar was drawn, and redrawn in place
  // The closing table: from its header to the blank line after it.
  const size_t header = text.find("arm ");
  ASSERT_NE(header, std::string::npos) << text;
  std::istringstream table(text.substr(text.rfind('\n', header) + 1));
  for (std::string line; std::getline(table, line) && line != "\r" && !line.empty();)
    EXPECT_LE(columns(line.substr(0, line.find('\r'))), 80u) << line;
  EXPECT_NE(text.find("final quality"), std::string::npos) << text;
  EXPECT_EQ(text.find("| arm |"), std::string::npos) << "a terminal gets the table that fits, not Markdown";
  EXPECT_NE(text.find("Results: " + (dir_ / "r").string()), std::string::npos) << text;
  EXPECT_NE(text.find(" report " + (dir_ / "r").string()), std::string::npos) << text;
}

TEST_F(Cli, ABadConvKernelChoiceExitsWith2BeforeARunStarts) {
  const fs::path spec = write_spec(small_spec());
  setenv("QUARTET_CONV_KERNEL", "fft", 1);
  const Result r = quartet({"run", spec.string(), "--out", (dir_ / "k").string(), "--progress=none"}, dir_);
  unsetenv("QUARTET_CONV_KERNEL");
  expect_exit2_with(r, "QUARTET_CONV_KERNEL: expected auto, rule, measure, im2col, winograd or onednn, got \"fft\"");
  EXPECT_FALSE(fs::exists(dir_ / "k"));
}

TEST_F(Cli, MeasuredConvKernelsAreRecordedWithTheRun) {
  json j = small_spec();
  j["workload"]["model"] = "cnn";
  j["train"]["epochs"] = 1;
  j["arms"] = json::parse(R"([{"name": "single", "regime": "single"}])");
  const fs::path spec = write_spec(j);
  setenv("QUARTET_CONV_KERNEL", "measure", 1);
  const Result r = quartet({"run", spec.string(), "--out", (dir_ / "m").string(), "--progress=none"}, dir_);
  unsetenv("QUARTET_CONV_KERNEL");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(json::parse(file_bytes(dir_ / "m" / "spec.json"))["environment"]["conv_kernel"], "measure");
  json chosen;
  std::istringstream records(file_bytes(dir_ / "m" / "single" / "roles" / "trainer.jsonl"));
  for (std::string line; std::getline(records, line);)
    if (json rec = json::parse(line); rec.contains("conv_kernels")) chosen = rec["conv_kernels"];
  ASSERT_TRUE(chosen.is_array()) << "no evaluation record lists the measured kernels";
  ASSERT_FALSE(chosen.empty());
  for (const json& c : chosen) {
    EXPECT_NE(c["shape"].get<std::string>().find(" w ("), std::string::npos);
    EXPECT_GE(c["seconds"].size(), 1u);
    EXPECT_TRUE(c["kernel"] == "im2col" || c["kernel"] == "winograd" || c["kernel"] == "onednn") << c;
  }
}

// The default policy: `quartet tune` measures the spec's conv shapes into the machine's
// table (a file of the test's own), and a run then takes every kernel from it, as every
// one of its processes would.
TEST_F(Cli, TuneFillsTheKernelTableThatARunThenReads) {
  json j = small_spec();
  j["workload"]["model"] = "cnn";
  j["train"]["epochs"] = 1;
  j["threads"] = 1;  // as tuned, however busy the machine is when the run starts
  j["arms"] = json::parse(R"([{"name": "single", "regime": "single"}])");
  const fs::path spec = write_spec(j);
  setenv("QUARTET_CONV_KERNEL", "auto", 1);
  setenv("QUARTET_KERNEL_CACHE", (dir_ / "kernels.json").c_str(), 1);
  const Result tune = quartet({"tune", spec.string()}, dir_);
  const Result run = quartet({"run", spec.string(), "--out", (dir_ / "t").string(), "--progress=none"}, dir_);
  const json table = json::parse(file_bytes(dir_ / "kernels.json"));  // what the run read
  const Result again = quartet({"tune", spec.string()}, dir_);
  const Result remeasured = quartet({"tune", spec.string(), "--again"}, dir_);
  unsetenv("QUARTET_KERNEL_CACHE");
  setenv("QUARTET_CONV_KERNEL", "rule", 1);
  ASSERT_EQ(tune.code, 0) << tune.out;
  ASSERT_EQ(run.code, 0) << run.out;
  EXPECT_NE(tune.out.find("kernel table: " + (dir_ / "kernels.json").string()), std::string::npos) << tune.out;
  EXPECT_NE(tune.out.find("conv shapes measured, 0 already in the table"), std::string::npos) << tune.out;
  EXPECT_NE(again.out.find(": 0 conv shapes measured"), std::string::npos) << again.out;
  EXPECT_NE(remeasured.out.find("conv shapes measured, 0 already in the table"), std::string::npos) << remeasured.out;
  EXPECT_EQ(json::parse(file_bytes(dir_ / "t" / "spec.json"))["environment"]["conv_kernel"], "auto");
  json chosen;
  std::istringstream records(file_bytes(dir_ / "t" / "single" / "roles" / "trainer.jsonl"));
  for (std::string line; std::getline(records, line);)
    if (json rec = json::parse(line); rec.contains("conv_kernels")) chosen = rec["conv_kernels"];
  ASSERT_TRUE(chosen.is_array() && !chosen.empty()) << "no evaluation record lists the kernels";
  for (const json& c : chosen) {
    EXPECT_EQ(c["source"], "cache") << c;
    EXPECT_EQ(table["kernels"]["conv|" + c["shape"].get<std::string>()]["kernel"], c["kernel"]) << c;
  }
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

// Output to a file, as in a batch job: a line per evaluation (each epoch's end) with the
// arm's and the run's ETA, then the summary table; --progress none prints the table only.
TEST_F(Cli, RedirectedOutputLogsEachEpochWithEtasAndEndsWithTheTable) {
  const fs::path spec = write_spec(small_spec());
  const Result r = quartet({"run", spec.string(), "--out", (dir_ / "r").string()}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const std::string line : {"[1/2] single: started", "[1/2] single: epoch 1.00, 50%, loss ",
                                 "[1/2] single: epoch 2.00, 100%, loss ", "[2/2] acc: epoch 1.00, 50%, loss ",
                                 "[2/2] acc: finished, "})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  const size_t epoch = r.out.find("[2/2] acc: epoch 1.00");
  ASSERT_NE(epoch, std::string::npos);
  const std::string line = r.out.substr(epoch, r.out.find('\n', epoch) - epoch);
  EXPECT_NE(line.find(", accuracy "), std::string::npos) << line;
  EXPECT_NE(line.find(" elapsed, ETA "), std::string::npos) << line;
  EXPECT_NE(line.find(", run ETA "), std::string::npos) << line;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << "no bar redrawn in a log";
  EXPECT_NE(r.out.find("| single | single | finished |"), std::string::npos) << r.out;

  const Result quiet = quartet({"run", spec.string(), "--out", (dir_ / "q").string(), "--progress=none"}, dir_);
  ASSERT_EQ(quiet.code, 0) << quiet.out;
  EXPECT_EQ(quiet.out.find("[1/2]"), std::string::npos) << quiet.out;
  EXPECT_NE(quiet.out.find("| acc | accumulate | finished |"), std::string::npos) << quiet.out;
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

TEST_F(Cli, RepeatsOutsideOneToTwentyExitWith2NamingTheField) {
  for (const int bad : {0, 21}) {
    json j = small_spec();
    j["repeats"] = bad;
    expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_), "spec.repeats: expected an integer");
  }
  json j = small_spec();
  j["repeats"] = 2;
  j["arms"][0]["remote"] = {"trainer"};
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_), "spec.repeats: 2 with remote roles");
}

// Repeat 1 is the run without repeats, bit for bit; repeat 2 runs with the next seed in
// its own run folder; the summary gives each figure's interval over both.
TEST_F(Cli, RepeatsRunWithDerivedSeedsAndTheSummaryGivesIntervals) {
  json j = small_spec();
  j["arms"] = json::array({j["arms"][0]});
  const Result once =
      quartet({"run", write_spec(j).string(), "--out", (dir_ / "once").string(), "--progress=none"}, dir_);
  ASSERT_EQ(once.code, 0) << once.out;
  j["repeats"] = 2;
  const fs::path run = dir_ / "twice";
  const Result twice = quartet({"run", write_spec(j).string(), "--out", run.string(), "--progress=none"}, dir_);
  ASSERT_EQ(twice.code, 0) << twice.out;

  EXPECT_EQ(file_bytes(run / "single" / "final.safetensors"),
            file_bytes(dir_ / "once" / "single" / "final.safetensors"));
  ASSERT_TRUE(fs::exists(run / "repeats" / "2" / "single" / "final.safetensors"));
  EXPECT_NE(file_bytes(run / "repeats" / "2" / "single" / "final.safetensors"),
            file_bytes(run / "single" / "final.safetensors"));
  EXPECT_EQ(json::parse(file_bytes(run / "repeats" / "2" / "spec.json"))["spec"]["seed"], 4);

  const json summary = json::parse(file_bytes(run / "single" / "summary.json"));
  EXPECT_EQ(summary["status"], "finished");
  EXPECT_EQ(summary["repeats"]["n"], 2);
  EXPECT_EQ(summary["repeats"]["seeds"], json({3, 4}));
  EXPECT_EQ(summary["repeats"]["identical"], false);
  EXPECT_EQ(summary["repeats"]["metrics"]["final_quality"]["n"], 2);
  EXPECT_GT(summary["repeats"]["metrics"]["samples_per_second"]["half_width"].get<double>(), 0.0);
  const std::string table = file_bytes(run / "summary.md");
  EXPECT_NE(table.find("Over repeats"), std::string::npos) << table;
  EXPECT_NE(table.find("| single | 2 |"), std::string::npos) << table;
  EXPECT_NE(table.find(" ± "), std::string::npos) << table;
  EXPECT_EQ(json::parse(file_bytes(run / "run.json"))["status"], "finished");

  const Result report = quartet({"report", run.string(), "--format", "md", "--quiet"}, dir_);
  ASSERT_EQ(report.code, 0) << report.out;
  const std::string page = file_bytes(run / "report" / "report.md");
  EXPECT_NE(page.find("Over repeats"), std::string::npos) << page;
  EXPECT_NE(page.find("](repeats-final_quality.svg)"), std::string::npos) << page;
  EXPECT_NE(file_bytes(run / "report" / "repeats-samples_per_second.svg").find("<line"), std::string::npos)
      << "no error bar";
}

// Ctrl-C in the second repeat: the first is kept as it was, and --resume runs only the
// second, to the same weights as an uninterrupted run.
TEST_F(Cli, InterruptedRepeatsResumeOnlyTheMissingRepeat) {
  json j = small_spec();
  j["arms"] = json::array({j["arms"][0]});
  j["train"]["epochs"] = 40;  // the second repeat runs long after its first checkpoint
  j["repeats"] = 2;
  const fs::path spec = write_spec(j);
  const Result whole = quartet({"run", spec.string(), "--out", (dir_ / "whole").string(), "--progress=none"}, dir_);
  ASSERT_EQ(whole.code, 0) << whole.out;

  const fs::path run = dir_ / "cut";
  const pid_t pid = start_quartet({"run", spec.string(), "--out", run.string(), "--progress=none"}, dir_ / "cut.log");
  const fs::path second = run / "repeats" / "2" / "single";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(3);
  while (!fs::exists(second / "checkpoint.safetensors") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  kill(pid, SIGINT);
  EXPECT_EQ(wait_exit(pid), 130) << file_bytes(dir_ / "cut.log");
  EXPECT_EQ(json::parse(file_bytes(run / "run.json"))["status"], "interrupted");
  EXPECT_EQ(json::parse(file_bytes(run / "repeats" / "2" / "run.json"))["arms"]["single"], "interrupted");
  ASSERT_FALSE(fs::exists(second / "final.safetensors"));
  const std::string first_records = file_bytes(run / "single" / "roles" / "trainer.jsonl");

  const Result resumed = quartet({"run", "--resume", run.string(), "--progress=none"}, dir_);
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_EQ(file_bytes(run / "single" / "roles" / "trainer.jsonl"), first_records) << "repeat 1 ran again";
  EXPECT_EQ(file_bytes(second / "final.safetensors"),
            file_bytes(dir_ / "whole" / "repeats" / "2" / "single" / "final.safetensors"));
  const json summary = json::parse(file_bytes(run / "single" / "summary.json"));
  EXPECT_EQ(summary["repeats"]["n"], 2);
  EXPECT_EQ(json::parse(file_bytes(run / "run.json"))["status"], "finished");
}

// A role started by hand "on another host" joins through the coordinator; its records
// land in the run folder like a local role's.
TEST_F(Cli, RemoteRoleJoinsThroughTheCoordinatorAndItsRecordsAreKept) {
  json j = small_spec();
  j["arms"] = json::array({{{"name", "single"}, {"regime", "single"}, {"remote", {"trainer"}}}});
  const fs::path run = dir_ / "run";
  const pid_t launcher = start_quartet({"run", write_spec(j).string(), "--out", run.string(), "--progress=none"},
                                       dir_ / "launcher.log");
  const std::string address_line = wait_for_line(dir_ / "launcher.log", "--coordinator ", std::chrono::seconds(60));
  ASSERT_FALSE(address_line.empty()) << file_bytes(dir_ / "launcher.log");
  const std::string address = address_line.substr(0, address_line.find(' '));
  std::string token = file_bytes(run / "token");
  token.erase(token.find_last_not_of('\n') + 1);
  ASSERT_EQ(token.size(), 32u);

  const pid_t role = start_quartet({"role", "--coordinator", address, "--arm", "single", "--role", "trainer",
                                    "--work-dir", (dir_ / "remote").string()},
                                   dir_ / "role.log", {"QUARTET_TOKEN=" + token, "QUARTET_THREADS=1"});
  EXPECT_EQ(wait_exit(role), 0) << file_bytes(dir_ / "role.log");
  ASSERT_EQ(wait_exit(launcher), 0) << file_bytes(dir_ / "launcher.log");

  // 256 samples / 32 per step, 2 epochs: 16 step records, sent over the network.
  std::istringstream lines(file_bytes(run / "single" / "roles" / "trainer.jsonl"));
  std::string line;
  int steps = 0;
  while (std::getline(lines, line)) EXPECT_EQ(json::parse(line)["step"], ++steps);
  EXPECT_EQ(steps, 16);
  EXPECT_EQ(json::parse(file_bytes(run / "single" / "summary.json"))["status"], "finished");
  EXPECT_TRUE(fs::exists(dir_ / "remote" / "single" / "final.safetensors"));
}

TEST_F(Cli, RoleWithAWrongTokenIsRefused) {
  json j = small_spec();
  j["arms"] = json::array({{{"name", "single"}, {"regime", "single"}, {"remote", {"trainer"}}}});
  const fs::path run = dir_ / "run";
  const pid_t launcher = start_quartet({"run", write_spec(j).string(), "--out", run.string(), "--progress=none"},
                                       dir_ / "launcher.log");
  const std::string address_line = wait_for_line(dir_ / "launcher.log", "--coordinator ", std::chrono::seconds(60));
  ASSERT_FALSE(address_line.empty()) << file_bytes(dir_ / "launcher.log");
  const std::string address = address_line.substr(0, address_line.find(' '));
  const pid_t role = start_quartet({"role", "--coordinator", address, "--arm", "single", "--role", "trainer",
                                    "--work-dir", (dir_ / "remote").string()},
                                   dir_ / "role.log", {"QUARTET_TOKEN=00000000000000000000000000000000"});
  EXPECT_NE(wait_exit(role), 0);
  EXPECT_NE(file_bytes(dir_ / "role.log").find("token"), std::string::npos) << file_bytes(dir_ / "role.log");
  kill(launcher, SIGINT);
  EXPECT_EQ(wait_exit(launcher), 130) << file_bytes(dir_ / "launcher.log");
}

// A remote role that dies mid-run: the coordinator notices, the arm fails naming it.
TEST_F(Cli, VanishedRemoteRoleFailsItsArmWithItsName) {
  json j = small_spec();
  j["train"]["epochs"] = 1000;
  j["arms"] = json::array({{{"name", "single"}, {"regime", "single"}, {"remote", {"trainer"}}}});
  const fs::path run = dir_ / "run";
  const pid_t launcher = start_quartet({"run", write_spec(j).string(), "--out", run.string(), "--progress=none"},
                                       dir_ / "launcher.log");
  const std::string address_line = wait_for_line(dir_ / "launcher.log", "--coordinator ", std::chrono::seconds(60));
  ASSERT_FALSE(address_line.empty()) << file_bytes(dir_ / "launcher.log");
  const std::string address = address_line.substr(0, address_line.find(' '));
  std::string token = file_bytes(run / "token");
  token.erase(token.find_last_not_of('\n') + 1);
  const pid_t role = start_quartet({"role", "--coordinator", address, "--arm", "single", "--role", "trainer",
                                    "--work-dir", (dir_ / "remote").string()},
                                   dir_ / "role.log", {"QUARTET_TOKEN=" + token, "QUARTET_THREADS=1"});
  // Let it train a little, then kill it without a goodbye.
  ASSERT_FALSE(wait_for_line(run / "single" / "roles" / "trainer.jsonl", "\"step\":", std::chrono::seconds(120)).empty());
  kill(role, SIGKILL);
  wait_exit(role);
  EXPECT_EQ(wait_exit(launcher), 1) << file_bytes(dir_ / "launcher.log");
  const json summary = json::parse(file_bytes(run / "single" / "summary.json"));
  EXPECT_EQ(summary["status"], "failed");
  EXPECT_NE(summary["error"].get<std::string>().find("role trainer vanished"), std::string::npos) << summary["error"];
}

// data_parallel end to end: two rank processes rendezvous through the run's coordinator
// and train over Gloo on 127.0.0.1; each writes its own records; the weights equal
// single's with the same global batch. zero 2 is measured per process here (the
// engine's memory figures are per process).
TEST_F(Cli, DataParallelArmRunsTwoRankProcessesAndZeroTwoShardsTheirMemory) {
  json j = small_spec();
  j["train"]["epochs"] = 1;
  j["arms"] = json::array({{{"name", "single"}, {"regime", "single"}},
                           {{"name", "ddp-2"}, {"regime", "data_parallel"}, {"ranks", 2}, {"bucket_mb", 0.1}},
                           {{"name", "ddp-2-z2"}, {"regime", "data_parallel"}, {"ranks", 2}, {"bucket_mb", 0.1},
                            {"zero", 2}}});
  const Result r = quartet({"run", write_spec(j).string(), "--out", (dir_ / "r").string(), "--progress=none"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  auto read_records = [&](const std::string& arm, const std::string& role) {
    std::vector<json> out;
    std::istringstream lines(file_bytes(dir_ / "r" / arm / "roles" / (role + ".jsonl")));
    std::string line;
    while (std::getline(lines, line)) out.push_back(json::parse(line));
    return out;
  };
  for (const char* arm : {"ddp-2", "ddp-2-z2"}) {
    const json summary = json::parse(file_bytes(dir_ / "r" / arm / "summary.json"));
    EXPECT_EQ(summary["status"], "finished") << arm;
    EXPECT_EQ(summary["processes"], 2) << arm;
    EXPECT_EQ(summary["samples"], 256) << arm;  // the arm's samples: 8 steps of the global batch
    EXPECT_TRUE(fs::exists(dir_ / "r" / arm / "final.safetensors")) << arm;
    for (const char* role : {"rank0", "rank1"}) {
      const std::vector<json> recs = read_records(arm, role);
      ASSERT_EQ(recs.size(), 8u) << arm << "/" << role;
      EXPECT_GT(recs.back()["bytes_sent"].get<int64_t>(), 0);
      EXPECT_EQ(recs.back()["comm"]["algorithmic"], true);
    }
    EXPECT_TRUE(read_records(arm, "rank0").back().contains("eval"));
    EXPECT_FALSE(read_records(arm, "rank1").back().contains("eval"));
    // The same update as single's up to float summation order (2e-6 on weights ~0.05).
    const std::vector<float> a = safetensors_floats(dir_ / "r" / "single" / "final.safetensors");
    const std::vector<float> b = safetensors_floats(dir_ / "r" / arm / "final.safetensors");
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GT(a.size(), 200000u);  // mlp: 235,146 parameters
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
    EXPECT_LT(worst, 2e-6) << arm;
  }
  // Per process: the momentum buffers (zero 2 shards them) and the gradients (zero 2
  // keeps its shard plus the bucket being filled) fall to 1/N plus one bucket.
  for (const char* role : {"rank0", "rank1"}) {
    const json z0 = read_records("ddp-2", role).back(), z2 = read_records("ddp-2-z2", role).back();
    const int64_t bucket = z2["comm"]["largest_bucket_bytes"].get<int64_t>();
    const int64_t opt0 = z0["memory"]["optimizer_state"]["peak"], opt2 = z2["memory"]["optimizer_state"]["peak"];
    const int64_t grad0 = z0["memory"]["gradients"]["peak"], grad2 = z2["memory"]["gradients"]["peak"];
    EXPECT_GT(opt0, 0);
    EXPECT_LE(opt2, opt0 / 2 + bucket) << role;
    EXPECT_LE(grad2, grad0 / 2 + bucket) << role;
    EXPECT_LT(opt2, opt0) << role;
  }
}

TEST_F(Cli, DataParallelBatchThatDoesNotSplitOverTheRanksExitsWith2) {
  json j = small_spec();
  j["arms"].push_back({{"name", "ddp-3"}, {"regime", "data_parallel"}, {"ranks", 3}});
  expect_exit2_with(quartet({"run", write_spec(j).string(), "--out", (dir_ / "r").string()}, dir_),
                    "spec.arms[2].ranks: the batch 32 does not split evenly over 3 ranks");
  EXPECT_FALSE(fs::exists(dir_ / "r"));
  j = small_spec();
  j["arms"].push_back({{"name", "ddp-nccl"}, {"regime", "data_parallel"}, {"ranks", 2}, {"backend", "nccl"}});
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_),
                    "spec.arms[2].backend: \"nccl\" reduces GPU memory; this arm runs on the cpu");
}

json federated_spec(int rounds) {
  return json::parse(R"({
    "name": "cli-fed",
    "workload": {"name": "synthetic", "model": "mlp", "train_samples": 256, "test_samples": 64},
    "seed": 3,
    "threads": 1,
    "train": {"batch": 16, "optimizer": {"lr": 0.05}},
    "arms": [{"name": "fed", "regime": "federated", "clients": 4, "processes": 2, "fraction": 0.5,
              "partition": {"kind": "dirichlet", "alpha": 0.5}, "rounds": )" + std::to_string(rounds) + "}]}");
}

// A small federated arm through the binary: a server and two pool processes, one
// record per round with bytes, times and the evaluation, and a summary.
TEST_F(Cli, FederatedArmRunsAServerAndPoolProcessesAndRecordsEveryRound) {
  const fs::path spec = write_spec(federated_spec(2));
  const Result r = quartet({"run", spec.string(), "--out", (dir_ / "run").string(), "--progress=none"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<json> rounds;
  std::ifstream in(dir_ / "run" / "fed" / "roles" / "server.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (j["type"] == "step") rounds.push_back(j);
  }
  ASSERT_EQ(rounds.size(), 2u);
  for (const json& j : rounds) {
    EXPECT_EQ(j["round"]["completed"], 2) << j.dump();
    EXPECT_GT(j["round"]["bytes"]["total"].get<int64_t>(), 4 * j["round"]["model_bytes"].get<int64_t>());
    EXPECT_TRUE(j.contains("eval"));
  }
  EXPECT_TRUE(fs::exists(dir_ / "run" / "fed" / "roles" / "pool0.jsonl"));
  EXPECT_TRUE(fs::exists(dir_ / "run" / "fed" / "roles" / "pool1.jsonl"));
  EXPECT_TRUE(fs::exists(dir_ / "run" / "fed" / "final.safetensors"));
  const json summary = json::parse(file_bytes(dir_ / "run" / "fed" / "summary.json"));
  EXPECT_EQ(summary["status"], "finished");
  EXPECT_EQ(summary["steps"], 2);
}

// Ctrl-C while the server is mid-run stops it (and its pools); --resume continues from
// the server's last round checkpoint and ends with the weights of an uninterrupted run.
TEST_F(Cli, InterruptedFederatedServerResumesToTheSameWeights) {
  const fs::path spec = write_spec(federated_spec(60));
  const Result whole = quartet({"run", spec.string(), "--out", (dir_ / "whole").string(), "--progress=none"}, dir_);
  ASSERT_EQ(whole.code, 0) << whole.out;
  const fs::path run = dir_ / "cut";
  const pid_t pid = start_quartet({"run", spec.string(), "--out", run.string(), "--progress=none"}, dir_ / "cut.log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(3);
  while (!fs::exists(run / "fed" / "checkpoint.safetensors") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(pid, SIGINT);
  EXPECT_EQ(wait_exit(pid), 130) << file_bytes(dir_ / "cut.log");
  EXPECT_FALSE(fs::exists(run / "fed" / "final.safetensors"));
  const Result resumed = quartet({"run", "--resume", run.string(), "--progress=none"}, dir_);
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_EQ(file_bytes(run / "fed" / "final.safetensors"), file_bytes(dir_ / "whole" / "fed" / "final.safetensors"));
}

}  // namespace

namespace {

json split_spec() {
  return json::parse(R"({
    "name": "cli-split",
    "workload": {"name": "synthetic", "model": "mlp", "train_samples": 256, "test_samples": 64},
    "seed": 3,
    "threads": 1,
    "train": {"epochs": 2, "batch": 32, "optimizer": {"lr": 0.05, "momentum": 0.9}},
    "arms": [{"name": "single", "regime": "single"},
             {"name": "vanilla-1", "regime": "split", "clients": 1, "cut": "fc1"},
             {"name": "ushaped-1", "regime": "split", "clients": 1, "variant": "ushaped", "cuts": ["fc1", "fc2"]}]
  })");
}

// Split learning with one client is single's computation cut in two: the same weights,
// bit for bit with one compute thread on each side. U-shaped, no label crosses; every
// turn's bytes are the analytic cost (activations and their gradients, labels, the client
// half both ways) plus framing under 1%.
TEST_F(Cli, SplitWithOneClientEqualsSingleAndItsBytesMatchTheAnalyticCost) {
  const Result r = quartet({"run", write_spec(split_spec()).string(), "--out", (dir_ / "r").string(),
                            "--progress=none"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<float> single = safetensors_floats(dir_ / "r" / "single" / "final.safetensors");
  ASSERT_GT(single.size(), 200000u);
  for (const char* arm : {"vanilla-1", "ushaped-1"}) {
    const std::vector<float> w = safetensors_floats(dir_ / "r" / arm / "final.safetensors");
    ASSERT_EQ(w.size(), single.size()) << arm;
    double worst = 0.0;
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(double(w[i]) - single[i]));
    EXPECT_LT(worst, 1e-7) << arm;
    const std::vector<json> steps = records_of(dir_ / "r" / arm / "roles" / "server.jsonl", "step");
    ASSERT_EQ(steps.size(), 2u) << arm;  // one turn per epoch
    EXPECT_TRUE(steps.back().contains("eval"));
    for (const json& s : steps) {
      const json& turn = s["split"]["turns"][0];
      ASSERT_TRUE(turn["ok"].get<bool>()) << turn.dump();
      EXPECT_EQ(turn["steps"], 8);
      const json shapes = std::string(arm) == "vanilla-1" ? json::array({json::array({32, 256})})
                                                          : json::array({json::array({32, 256}), json::array({32, 128})});
      EXPECT_EQ(turn["cut"]["shapes"], shapes);
      int64_t measured = 0;
      for (const auto& [kind, c] : turn["traffic"].items())
        measured += c["sent"].get<int64_t>() + c["received"].get<int64_t>();
      const int64_t analytic = turn["analytic_bytes"];
      EXPECT_GE(measured, analytic) << arm;
      EXPECT_LT(double(measured - analytic), 0.01 * analytic) << arm << ": " << turn["traffic"].dump();
      const bool labels_cross = turn["traffic"].contains("labels");
      EXPECT_EQ(labels_cross, std::string(arm) == "vanilla-1") << turn["traffic"].dump();
      if (labels_cross) {
        EXPECT_GE(turn["traffic"]["labels"]["received"].get<int64_t>(), 8 * 32 * 4);
      }
    }
    const std::vector<json> client = records_of(dir_ / "r" / arm / "roles" / "pool0.jsonl", "client_turn");
    ASSERT_EQ(client.size(), 2u);
    EXPECT_GT(client[0]["rss_peak"].get<int64_t>(), 0);
  }
}

// SplitFed, both server-half policies, four clients on two pool processes.
TEST_F(Cli, SplitFedRunsClientsInParallelAndAveragesTheHalves) {
  json j = split_spec();
  j["arms"] = json::array({{{"name", "sflv1"}, {"regime", "split"}, {"clients", 4}, {"processes", 2},
                            {"variant", "splitfed"}, {"cut", "fc1"}},
                           {{"name", "sflv2"}, {"regime", "split"}, {"clients", 4}, {"processes", 2},
                            {"variant", "splitfed"}, {"cut", "fc1"}, {"server_halves", "shared"}}});
  const Result r = quartet({"run", write_spec(j).string(), "--out", (dir_ / "r").string(), "--progress=none"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* arm : {"sflv1", "sflv2"}) {
    const std::vector<json> steps = records_of(dir_ / "r" / arm / "roles" / "server.jsonl", "step");
    ASSERT_EQ(steps.size(), 2u) << arm;  // one record per epoch
    ASSERT_EQ(steps[0]["split"]["turns"].size(), 4u);
    for (const json& t : steps[0]["split"]["turns"]) EXPECT_TRUE(t["ok"].get<bool>()) << t.dump();
    EXPECT_EQ(steps.back()["samples"], 2 * 4 * 2 * 32);  // 2 epochs x 4 clients x 2 steps of 32
    const json summary = json::parse(file_bytes(dir_ / "r" / arm / "summary.json"));
    EXPECT_EQ(summary["status"], "finished");
  }
}

TEST_F(Cli, SplitCutsThatAreNotStagesExitWith2) {
  json j = split_spec();
  j["arms"][1]["cut"] = "conv9";
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_),
                    "spec.arms[1].cut: \"conv9\" is not a stage of mlp; its stages are \"fc1\", \"fc2\", \"fc3\"");
  j = split_spec();
  j["arms"][1]["cut"] = "fc3";
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_), "is the last stage");
  j = split_spec();
  j["arms"][2]["cuts"] = json::array({"fc2", "fc1"});
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_), "spec.arms[2].cuts: the second cut");
}

// An arm's own model: it starts from that model's weights made from the run's seed
// (init-<model>.safetensors beside init.safetensors), its roles build that model (the
// split cut is one of its stages), and its final weights are that model's.
TEST_F(Cli, ArmsWithTheirOwnModelTrainAndSaveThatModel) {
  json j = small_spec();
  j["train"]["epochs"] = 1;
  j["arms"] = json::array({{{"name", "single"}, {"regime", "single"}},
                           {{"name", "fed-lenet5"}, {"regime", "federated"}, {"model", "lenet5"}, {"clients", 2}},
                           {{"name", "split-lenet5"}, {"regime", "split"}, {"model", "lenet5"}, {"clients", 2},
                            {"cut", "conv2"}}});
  const Result r = quartet({"run", write_spec(j).string(), "--out", (dir_ / "r").string(), "--progress=none"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  constexpr size_t kMlp = 235146, kLenet5 = 61706;
  EXPECT_EQ(safetensors_floats(dir_ / "r" / "init.safetensors").size(), kMlp);
  EXPECT_EQ(safetensors_floats(dir_ / "r" / "init-lenet5.safetensors").size(), kLenet5);
  EXPECT_FALSE(fs::exists(dir_ / "r" / "init-mlp.safetensors"));
  EXPECT_EQ(safetensors_floats(dir_ / "r" / "single" / "final.safetensors").size(), kMlp);
  for (const char* arm : {"fed-lenet5", "split-lenet5"}) {
    const std::vector<float> w = safetensors_floats(dir_ / "r" / arm / "final.safetensors");
    EXPECT_EQ(w.size(), kLenet5) << arm;
    EXPECT_NE(w, safetensors_floats(dir_ / "r" / "init-lenet5.safetensors")) << arm << " did not train";
    EXPECT_EQ(json::parse(file_bytes(dir_ / "r" / arm / "summary.json"))["status"], "finished") << arm;
  }
  const std::string weights = (dir_ / "r" / "split-lenet5" / "final.safetensors").string();
  const Result eval = quartet({"eval", weights, "--workload", "synthetic", "--model", "lenet5"}, dir_);
  EXPECT_EQ(eval.code, 0) << eval.out;
  // The run folder says which workload and model: eval needs neither, and gives the
  // quality the arm ended with.
  const Result recorded = quartet({"eval", weights}, dir_);
  ASSERT_EQ(recorded.code, 0) << recorded.out;
  EXPECT_NE(recorded.out.find("(model lenet5, as recorded in "), std::string::npos) << recorded.out;
  const double final_quality =
      json::parse(file_bytes(dir_ / "r" / "split-lenet5" / "summary.json"))["final_quality"].get<double>();
  const std::string metric = "accuracy ";
  ASSERT_EQ(recorded.out.rfind(metric, 0), 0u) << recorded.out;
  EXPECT_NEAR(std::stod(recorded.out.substr(metric.size())), final_quality, 1e-5) << recorded.out;
  // Weights of another model: one line naming the first mismatch.
  const Result wrong = quartet({"eval", weights, "--workload", "synthetic", "--model", "mlp"}, dir_);
  expect_exit2_with(wrong, "are these weights of model mlp?");
  EXPECT_NE(wrong.out.find("more mismatches)"), std::string::npos) << wrong.out;
  EXPECT_EQ(std::count(wrong.out.begin(), wrong.out.end(), '\n'), 1) << wrong.out;
  // Weights outside a run folder: the model must be given.
  fs::copy_file(weights, dir_ / "loose.safetensors");
  expect_exit2_with(quartet({"eval", (dir_ / "loose.safetensors").string()}, dir_), "--model: needed: ");
}

}  // namespace

namespace {

// data_parallel with a rank killed mid-run: the arm fails with a message naming the rank,
// the records and the last checkpoint are kept, and --resume continues from that
// checkpoint to the weights of an uninterrupted run.
TEST_F(Cli, DataParallelRankKilledMidRunIsNamedAndResumeContinuesFromTheCheckpoint) {
  json j = small_spec();
  j["train"]["epochs"] = 60;
  j["arms"] = json::array({{{"name", "ddp"}, {"regime", "data_parallel"}, {"ranks", 2}, {"bucket_mb", 0.1}}});
  const fs::path spec = write_spec(j);
  const Result whole = quartet({"run", spec.string(), "--out", (dir_ / "whole").string(), "--progress=none"}, dir_);
  ASSERT_EQ(whole.code, 0) << whole.out;

  const fs::path run = dir_ / "cut";
  const pid_t launcher = start_quartet({"run", spec.string(), "--out", run.string(), "--progress=none"},
                                       dir_ / "launcher.log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(3);
  while (!fs::exists(run / "ddp" / "checkpoint.safetensors") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(fs::exists(run / "ddp" / "checkpoint.safetensors")) << file_bytes(dir_ / "launcher.log");
  const pid_t rank1 = find_role_process(run, "rank1");
  ASSERT_GT(rank1, 0);
  kill(rank1, SIGKILL);
  const int code = wait_exit(launcher);
  const std::string log = file_bytes(dir_ / "launcher.log");
  EXPECT_NE(code, 0) << log;
  EXPECT_NE(log.find("rank1"), std::string::npos) << log;
  const json summary = json::parse(file_bytes(run / "ddp" / "summary.json"));
  EXPECT_EQ(summary["status"], "failed");
  EXPECT_GT(summary["steps"].get<int64_t>(), 0);  // what was recorded before the kill is kept
  EXPECT_FALSE(fs::exists(run / "ddp" / "final.safetensors"));
  EXPECT_TRUE(fs::exists(run / "ddp" / "checkpoint.safetensors"));

  const Result resumed = quartet({"run", "--resume", run.string(), "--progress=none"}, dir_);
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_EQ(json::parse(file_bytes(run / "ddp" / "summary.json"))["status"], "finished");
  EXPECT_EQ(file_bytes(run / "ddp" / "final.safetensors"), file_bytes(dir_ / "whole" / "ddp" / "final.safetensors"));
}

// Rank processes over the shared-memory backend. With two ranks both backends add the
// same two numbers (a + b == b + a in IEEE arithmetic) and scale by 1/2, so the weights
// equal Gloo's bit for bit; and nothing is left in /dev/shm.
TEST_F(Cli, DataParallelOverSharedMemoryEqualsGlooBitForBit) {
  auto segments = [] {
    int n = 0;
    for (const auto& e : fs::directory_iterator("/dev/shm")) n += e.path().filename().string().rfind("quartet-", 0) == 0;
    return n;
  };
  const int before = segments();
  json j = small_spec();
  j["train"]["epochs"] = 1;
  j["arms"] = json::array({{{"name", "gloo"}, {"regime", "data_parallel"}, {"ranks", 2}, {"bucket_mb", 0.1}},
                           {{"name", "shm"}, {"regime", "data_parallel"}, {"ranks", 2}, {"bucket_mb", 0.1},
                            {"backend", "shm"}}});
  const fs::path run = dir_ / "run";
  const Result r = quartet({"run", write_spec(j).string(), "--out", run.string(), "--progress=none"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(file_bytes(run / "shm" / "final.safetensors"), file_bytes(run / "gloo" / "final.safetensors"));
  EXPECT_GT(json::parse(file_bytes(run / "shm" / "summary.json"))["steps"].get<int64_t>(), 0);
  EXPECT_EQ(segments(), before);
}

}  // namespace

namespace {

// data_parallel across two hosts: the launcher and rank 0 in one network namespace, rank 1
// joining from the other through the coordinator, Gloo between 192.0.2.1 and 192.0.2.2;
// the weights equal single's.
TEST_F(Cli, DataParallelTrainsAcrossTwoHostsInNetworkNamespaces) {
  using quartet::transport::testing::TwoNamespaces;
  TwoNamespaces ns;
  if (const std::string why = ns.create(); !why.empty()) GTEST_SKIP() << why;

  json j = small_spec();
  j["train"]["epochs"] = 1;
  j["arms"] = json::array({{{"name", "single"}, {"regime", "single"}},
                           {{"name", "ddp"}, {"regime", "data_parallel"}, {"ranks", 2}, {"bucket_mb", 0.1},
                            {"remote", {"rank1"}}}});
  const fs::path run = dir_ / "run";
  const pid_t launcher =
      start_quartet({"run", write_spec(j).string(), "--out", run.string(), "--progress=none", "--listen", "192.0.2.1"},
                    dir_ / "launcher.log", {"QUARTET_GLOO_HOST=192.0.2.1"}, {"ip", "netns", "exec", ns.a()});
  const std::string address_line = wait_for_line(dir_ / "launcher.log", "--coordinator ", std::chrono::seconds(120));
  ASSERT_FALSE(address_line.empty()) << file_bytes(dir_ / "launcher.log");
  const std::string address = address_line.substr(0, address_line.find(' '));
  EXPECT_EQ(address.rfind("192.0.2.1:", 0), 0u) << address;
  std::string token = file_bytes(run / "token");
  token.erase(token.find_last_not_of('\n') + 1);
  const pid_t role = start_quartet({"role", "--coordinator", address, "--arm", "ddp", "--role", "rank1", "--work-dir",
                                    (dir_ / "remote").string()},
                                   dir_ / "role.log",
                                   {"QUARTET_TOKEN=" + token, "QUARTET_THREADS=1", "QUARTET_GLOO_HOST=192.0.2.2"},
                                   {"ip", "netns", "exec", ns.b()});
  EXPECT_EQ(wait_exit(role), 0) << file_bytes(dir_ / "role.log");
  ASSERT_EQ(wait_exit(launcher), 0) << file_bytes(dir_ / "launcher.log");
  EXPECT_EQ(json::parse(file_bytes(run / "ddp" / "summary.json"))["status"], "finished");
  const std::vector<float> a = safetensors_floats(run / "single" / "final.safetensors");
  const std::vector<float> b = safetensors_floats(run / "ddp" / "final.safetensors");
  ASSERT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  EXPECT_LT(worst, 2e-6);
}

}  // namespace

namespace {

// A vanilla pool hosting many clients holds one model at a time (the one training), not
// one per client: its tracked parameter bytes stay those of one model.
TEST_F(Cli, SplitPoolHoldsOneModelWhateverItsClientCount) {
  json j = split_spec();
  j["arms"] = json::array({{{"name", "sl"}, {"regime", "split"}, {"clients", 8}, {"cut", "fc1"}}});
  const Result r = quartet({"run", write_spec(j).string(), "--out", (dir_ / "r").string(), "--progress=none"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<json> turns = records_of(dir_ / "r" / "sl" / "roles" / "pool0.jsonl", "client_turn");
  ASSERT_EQ(turns.size(), 16u);  // 8 clients x 2 epochs
  const int64_t model_bytes = 235146 * 4;  // mlp
  for (const json& t : turns) {
    EXPECT_GE(t["memory"]["parameters"]["current"].get<int64_t>(), model_bytes);
    EXPECT_LT(t["memory"]["parameters"]["current"].get<int64_t>(), 2 * model_bytes) << t.dump();
  }
}

}  // namespace

namespace {

json pipeline_spec() {
  return json::parse(R"({
    "name": "cli-pipeline",
    "workload": {"name": "synthetic", "model": "cnn", "train_samples": 256, "test_samples": 64},
    "seed": 3,
    "threads": 1,
    "train": {"epochs": 1, "batch": 32, "optimizer": {"lr": 0.05, "momentum": 0.9}},
    "arms": [{"name": "accum-4", "regime": "accumulate", "micro_batches": 4},
             {"name": "gpipe-2", "regime": "pipeline", "cuts": ["conv2"], "micro_batches": 4, "schedule": "gpipe"},
             {"name": "1f1b-4", "regime": "pipeline", "cuts": ["conv1", "conv2", "fc1"], "micro_batches": 4}]
  })");
}

// Stage processes started by `quartet run` over sockets compute accumulate's update with
// the same micro-batches, bit for bit; stage 0 evaluates and writes the whole model.
TEST_F(Cli, PipelineStageProcessesEqualAccumulateBitForBit) {
  const Result r = quartet({"run", write_spec(pipeline_spec()).string(), "--out", (dir_ / "r").string(),
                            "--progress=none"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string accumulate = file_bytes(dir_ / "r" / "accum-4" / "final.safetensors");
  for (const char* arm : {"gpipe-2", "1f1b-4"}) {
    EXPECT_EQ(file_bytes(dir_ / "r" / arm / "final.safetensors"), accumulate) << arm;
    const std::vector<json> steps = records_of(dir_ / "r" / arm / "roles" / "stage0.jsonl", "step");
    ASSERT_EQ(steps.size(), 8u) << arm;
    EXPECT_TRUE(steps.back().contains("eval")) << arm;
    EXPECT_GT(steps.back()["bytes_sent"].get<int64_t>(), 0) << arm;
    const json summary = json::parse(file_bytes(dir_ / "r" / arm / "summary.json"));
    EXPECT_EQ(summary["status"], "finished") << arm;
  }
}

// The bytes of each model stage's tensors in a safetensors file: its header's data
// offsets, summed per name prefix ("conv1.weight" is conv1's).
std::map<std::string, int64_t> stage_bytes(const fs::path& p) {
  const std::string bytes = file_bytes(p);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  std::map<std::string, int64_t> out;
  const json header = json::parse(bytes.substr(8, n));
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    out[name.substr(0, name.find('.'))] += t["data_offsets"][1].get<int64_t>() - t["data_offsets"][0].get<int64_t>();
  }
  return out;
}

// Each stage process frees the weights of the stages it does not run: its parameter
// memory, current and peak, is its own stages' at every step, evaluations included; its
// activations are its own too, and every step holds some.
TEST_F(Cli, PipelineStageProcessesHoldOnlyTheirOwnStagesParameters) {
  const Result r = quartet({"run", write_spec(pipeline_spec()).string(), "--out", (dir_ / "r").string(),
                            "--progress=none"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::map<std::string, int64_t> bytes = stage_bytes(dir_ / "r" / "accum-4" / "final.safetensors");
  const std::vector<std::string> cnn{"conv1", "conv2", "fc1", "fc2"};
  for (const auto& [arm, stages] : {std::pair{"gpipe-2", 2}, std::pair{"1f1b-4", 4}})
    for (int s = 0; s < stages; ++s) {
      const std::vector<json> steps =
          records_of(dir_ / "r" / arm / "roles" / ("stage" + std::to_string(s) + ".jsonl"), "step");
      ASSERT_FALSE(steps.empty()) << arm;
      const json& p = steps.front()["pipeline"];
      int64_t own = 0;
      for (auto it = std::find(cnn.begin(), cnn.end(), p["first"]); it != cnn.end(); ++it) {
        own += bytes.at(*it);
        if (*it == p["last"]) break;
      }
      int64_t whole = 0;
      for (const auto& [stage, b] : bytes) whole += b;
      ASSERT_LT(own, whole) << arm << " stage " << s;
      std::cout << "[ measured ] " << arm << " stage " << s << ": parameters " << own << " of " << whole << " bytes\n";
      for (const json& step : steps) {
        EXPECT_EQ(step["memory"]["parameters"]["current"].get<int64_t>(), own) << arm << " stage " << s;
        EXPECT_EQ(step["memory"]["parameters"]["peak"].get<int64_t>(), own) << arm << " stage " << s;
        EXPECT_GT(step["pipeline"]["activations_peak"].get<int64_t>(), 0) << arm << " stage " << s;
      }
    }
}

TEST_F(Cli, PipelineSettingsThatCannotRunExitWith2) {
  json j = pipeline_spec();
  j["arms"][1]["cuts"] = json::array({"conv9"});
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_),
                    "spec.arms[1].cuts[0]: \"conv9\" is not a stage of cnn; its stages are \"conv1\", \"conv2\", "
                    "\"fc1\", \"fc2\"");
  j = pipeline_spec();
  j["arms"][2]["cuts"] = json::array({"conv2", "conv1"});
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_), "spec.arms[2].cuts[1]: \"conv1\" does not "
                                                                           "come after \"conv2\"");
  j = pipeline_spec();
  j["arms"][1]["micro_batches"] = 3;
  expect_exit2_with(quartet({"validate", write_spec(j).string()}, dir_),
                    "spec.arms[1].micro_batches: 3 does not divide the batch 32");
}

}  // namespace

// A spec that would start a million processes, a thousand ranks or a hundred thousand
// threads, or that asks for what cannot run (a batch of 1e12, a deadline of 1e-300 s, a
// text corpus of 6 GB), is refused by `quartet validate` and `quartet run` alike before
// anything starts, the field and what is allowed named; nothing is left behind. A weights
// file whose header lists a million and a half tensors is refused in seconds.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;
using cli_util::expect_exit2_with;
using cli_util::quartet;
using nlohmann::json;

class Limits : public quartet::test_util::TempFolderTest {
 protected:
  Limits() : TempFolderTest("limits") {}

  fs::path write_spec(const json& arm, const json& top = json::object()) {
    json spec = {{"name", "greedy"},
                 {"workload", {{"name", "synthetic"}, {"model", "mlp"}}},
                 {"train", {{"batch", 1000}}},
                 {"arms", json::array({arm})}};
    spec.update(top);
    const fs::path p = dir_ / "spec.json";
    std::ofstream(p) << spec.dump(2);
    return p;
  }
};

TEST_F(Limits, AMillionProcessesAreRefusedBeforeAnyStarts) {
  const fs::path spec =
      write_spec({{"name", "f"}, {"regime", "federated"}, {"clients", 1000000}, {"processes", 1000000}});
  expect_exit2_with(quartet({"validate", spec.string()}, dir_), "exceed this machine's limit of");
  expect_exit2_with(quartet({"run", spec.string(), "--out", (dir_ / "run").string(), "--progress", "none"}, dir_),
                    "\"override_limits\": true (the arm's, or the experiment's) goes past it");
  EXPECT_FALSE(fs::exists(dir_ / "run"));
}

TEST_F(Limits, AThousandRanksAndAHundredThousandThreadsAreRefused) {
  expect_exit2_with(quartet({"validate", write_spec({{"name", "d"}, {"regime", "data_parallel"}, {"ranks", 1000}})
                                             .string()},
                            dir_),
                    "spec.arms[0].ranks: 1000 rank processes on this host exceed this machine's limit");
  expect_exit2_with(quartet({"validate", write_spec({{"name", "s"}, {"regime", "single"}}, {{"threads", 100000}})
                                             .string()},
                            dir_),
                    "spec.threads: expected an integer ≥ 0 and ≤ 1024, got 100000");
}

// Each value the hostile re-test found validating but not running, with the field the
// refusal names: validate and run say the same, and run leaves no folder.
TEST_F(Limits, WhatCannotRunIsRefusedByValidateAndRunAlike) {
  const json synthetic = {{"name", "synthetic"}, {"model", "mlp"}, {"train_samples", 256}, {"test_samples", 64}};
  struct Case {
    json arm, train;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{{"name", "s"}, {"regime", "single"}}, {{"batch", 1e12}}, "spec.train.batch: expected an integer ≥ 1 and ≤ 16777216"},
      {{{"name", "s"}, {"regime", "single"}}, {{"batch", 32}, {"epochs", 1e12}}, "spec.train.epochs: expected an integer ≥ 1 and ≤ 1000000"},
      {{{"name", "s"}, {"regime", "single"}}, {{"batch", 32}, {"eval_batch", 1e12}}, "spec.train.eval_batch:"},
      {{{"name", "s"}, {"regime", "single"}}, {{"batch", 32}, {"optimizer", {{"lr", 1e308}}}},
       "spec.train.optimizer.lr: expected a number > 0 and ≤ 1000"},
      {{{"name", "s"}, {"regime", "single"}}, {{"batch", 512}}, "spec.arms[0].train.batch: 512 is larger than the training set (256 samples)"},
      {{{"name", "f"}, {"regime", "federated"}, {"clients", 2}, {"rounds", 1e12}}, {{"batch", 32}},
       "spec.arms[0].rounds: expected an integer ≥ 1 and ≤ 1000000"},
      {{{"name", "f"}, {"regime", "federated"}, {"clients", 2}, {"deadline_s", 1e-300}}, {{"batch", 32}},
       "spec.arms[0].deadline_s: expected a number ≥ 0.01 and ≤ 604800"},
      {{{"name", "d"}, {"regime", "data_parallel"}, {"ranks", 2}, {"bucket_mb", 1e-30}}, {{"batch", 32}},
       "spec.arms[0].bucket_mb: expected a number ≥ 0.001 and ≤ 4096"},
      {{{"name", "p"}, {"regime", "split"}, {"clients", 2}, {"cut", "fc1"}, {"step_timeout_s", 1e-300}}, {{"batch", 32}},
       "spec.arms[0].step_timeout_s: expected a number ≥ 0.01 and ≤ 604800"},
  };
  for (const Case& c : cases) {
    const fs::path spec = write_spec(c.arm, {{"workload", synthetic}, {"train", c.train}});
    const cli_util::Result validate = quartet({"validate", spec.string()}, dir_);
    const cli_util::Result run = quartet({"run", spec.string(), "--out", (dir_ / "run").string()}, dir_);
    expect_exit2_with(validate, c.says);
    expect_exit2_with(run, c.says);
    EXPECT_FALSE(fs::exists(dir_ / "run")) << c.says;
  }
}

// A text-lm data_dir holding a 6 GB (sparse) file was read whole until memory ran out:
// its size is checked first, by validate too.
TEST_F(Limits, ATextFileOverTheCapIsRefusedBeforeItIsRead) {
  const fs::path data = dir_ / "texts";
  fs::create_directories(data);
  std::ofstream(data / "small") << "a fortune\n%\nanother\n%\n";
  std::ofstream(data / "huge").close();
  fs::resize_file(data / "huge", uint64_t{6} << 30);  // sparse: no disk used
  const fs::path spec = write_spec({{"name", "s"}, {"regime", "single"}},
                                   {{"workload", {{"name", "text-lm"}, {"model", "gpt-mini"}, {"data_dir", data.string()}}},
                                    {"train", {{"batch", 4}}}});
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"validate", spec.string()},
        std::vector<std::string>{"run", spec.string(), "--out", (dir_ / "run").string()}}) {
    const auto start = std::chrono::steady_clock::now();
    expect_exit2_with(quartet(args, dir_), (data / "huge").string() + ": 6442450944 bytes; allowed: at most 67108864 "
                                                                     "bytes a file (64 MiB) in a text-lm data_dir");
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << "read before refused";
  }
  EXPECT_FALSE(fs::exists(dir_ / "run"));
}

// 1,500,000 zero-size tensors in an 89 MB header (under the 100 MB header cap): parsed into
// an ordered map, this took over two minutes in eval; it is refused once the parser passes
// the tensor limit.
TEST_F(Limits, AWeightsFileListingMillionsOfTensorsIsRefusedQuickly) {
  std::string header = "{";
  for (int i = 0; i < 1500000; ++i)
    header += (i ? ",\"t" : "\"t") + std::to_string(i) + R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string size(8, '\0');
  for (int i = 0; i < 8; ++i) size[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::ofstream(dir_ / "many.safetensors", std::ios::binary) << size << header;
  ASSERT_GT(fs::file_size(dir_ / "many.safetensors"), 80'000'000u);
  const auto start = std::chrono::steady_clock::now();
  expect_exit2_with(quartet({"eval", (dir_ / "many.safetensors").string(), "--workload", "synthetic", "--model", "mlp"},
                            dir_),
                    "header lists more than 65536 tensors; allowed: at most that many");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60)) << "took as long as a quadratic parse";
}

}  // namespace

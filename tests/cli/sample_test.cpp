// `quartet sample` through the `quartet` binary: gpt-mini weights written here, text out,
// seeded and repeatable, and bad arguments refused. Real processes, so labelled multirank
// and run serially.

#include <gtest/gtest.h>

#include <string>

#include "engine/safetensors.h"
#include "tests/cli/cli_util.h"
#include "workloads/models.h"

namespace {

namespace fs = std::filesystem;
using namespace quartet;
using cli_util::expect_exit2_with;
using cli_util::quartet;
using cli_util::Result;

class SampleCli : public cli_util::FolderTest {
 protected:
  SampleCli() : FolderTest("cli_sample") {}
  void SetUp() override {
    FolderTest::SetUp();
    weights_ = dir_ / "gpt.safetensors";
    engine::save_safetensors(weights_.string(), workloads::make_model("gpt-mini", 4)->state_dict());
  }
  Result sample(std::vector<std::string> args) {
    args.insert(args.begin(), {"sample", weights_.string()});
    return quartet(args, dir_);
  }
  fs::path weights_;
};

TEST_F(SampleCli, ContinuesThePromptByTheAskedBytesAndRepeatsWithTheSeed) {
  const Result a = sample({"--prompt", "Hello, ", "--length", "40", "--seed", "3", "--temperature", "1"});
  ASSERT_EQ(a.code, 0) << a.out;
  ASSERT_EQ(a.out.size(), 7u + 40u + 1u) << a.out;
  EXPECT_EQ(a.out.substr(0, 7), "Hello, ");
  EXPECT_EQ(a.out.back(), '\n');
  EXPECT_EQ(sample({"--prompt", "Hello, ", "--length", "40", "--seed", "3", "--temperature", "1"}).out, a.out);
  EXPECT_NE(sample({"--prompt", "Hello, ", "--length", "40", "--seed", "4", "--temperature", "1"}).out, a.out);
}

// Temperature 0 takes the likeliest byte whatever the seed.
TEST_F(SampleCli, TemperatureZeroIsGreedyAndIgnoresTheSeed) {
  const Result a = sample({"--prompt", "%\n", "--length", "30", "--temperature", "0", "--seed", "1"});
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(sample({"--prompt", "%\n", "--length", "30", "--temperature", "0", "--seed", "2"}).out, a.out);
}

// A prompt longer than the context: the model reads its last 128 bytes.
TEST_F(SampleCli, APromptLongerThanTheContextIsCutToItsEnd) {
  const std::string prompt(300, 'a');
  const Result r = sample({"--prompt", prompt, "--length", "5"});
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.size(), 300u + 5u + 1u);
}

TEST_F(SampleCli, BadArgumentsAreRefusedNamingTheArgument) {
  expect_exit2_with(sample({"--length", "0"}), "--length: expected 1 to 100000 bytes, got 0");
  expect_exit2_with(sample({"--temperature", "-1"}), "--temperature: expected 0 to 100");
  expect_exit2_with(sample({"--top-k", "300"}), "--top-k: expected 0 to 256, got 300");
  expect_exit2_with(sample({"--model", "cnn"}), "--model: cnn is not a language model");
  const fs::path cnn = dir_ / "cnn.safetensors";
  engine::save_safetensors(cnn.string(), workloads::make_model("cnn", 1)->state_dict());
  expect_exit2_with(quartet({"sample", cnn.string()}, dir_), "are these weights of model gpt-mini?");
}

}  // namespace

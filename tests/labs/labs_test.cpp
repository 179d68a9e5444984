// The course labs (docs/labs/), each run in a reduced form: the lab's own experiment file
// with small synthetic data, fewer steps or arms and one compute thread a process, so that
// each finishes in seconds and its outcome follows from the seed alone. Each test asserts
// the lab's qualitative result on weights, byte counts and memory figures, never on
// timings. Real processes (the launcher and its roles): labelled labs and multirank, run
// serially.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/cli/cli_util.h"

#ifndef QUARTET_SOURCE_DIR
#error "QUARTET_SOURCE_DIR must name the source tree"
#endif

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using cli_util::file_bytes;
using cli_util::quartet;
using cli_util::records_of;
using cli_util::Result;
using cli_util::safetensors_floats;

const fs::path kSource = QUARTET_SOURCE_DIR;
const std::vector<std::string> kLabs = {"big-batch", "ring-bytes", "zero-memory", "fedavg-noniid"};

class Labs : public cli_util::FolderTest {
 protected:
  Labs() : FolderTest("labs") {}

  // The lab's experiment file on synthetic data of `train` and `test` samples, one
  // compute thread a process, and only the arms `keep` accepts.
  static json reduced(const std::string& lab, int train, int test,
                      const std::function<bool(const json&)>& keep = [](const json&) { return true; }) {
    std::ifstream in(kSource / "experiments" / "labs" / (lab + ".json"));
    json spec = json::parse(in, nullptr, true, /*ignore_comments=*/true);
    spec["workload"] = {{"name", "synthetic"}, {"model", spec["workload"]["model"]},
                        {"train_samples", train}, {"test_samples", test}};
    spec["threads"] = 1;
    json arms = json::array();
    for (const json& arm : spec["arms"])
      if (keep(arm)) arms.push_back(arm);
    spec["arms"] = arms;
    return spec;
  }

  // Runs `spec` to its end and returns its run folder.
  fs::path run(const json& spec) {
    const fs::path file = dir_ / "spec.json";
    std::ofstream(file) << spec.dump(2);
    const fs::path out = dir_ / "run";
    const Result r = quartet({"run", file.string(), "--out", out.string(), "--progress=none"}, dir_);
    EXPECT_EQ(r.code, 0) << r.out;
    return out;
  }

  static json summary(const fs::path& run, const std::string& arm) {
    return json::parse(file_bytes(run / arm / "summary.json"));
  }
};

double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

// Every lab has its experiment, its page, its teacher's answers and a line in the index,
// and its experiment is a valid spec as it stands.
TEST_F(Labs, EveryLabHasItsExperimentPageAnswersAndIndexLine) {
  const std::string index = file_bytes(kSource / "docs" / "labs" / "README.md");
  for (const std::string& lab : kLabs) {
    const fs::path spec = kSource / "experiments" / "labs" / (lab + ".json");
    const Result r = quartet({"validate", spec.string()}, dir_);
    EXPECT_EQ(r.code, 0) << lab << ": " << r.out;
    EXPECT_TRUE(fs::exists(kSource / "docs" / "labs" / (lab + ".md"))) << lab;
    EXPECT_TRUE(fs::exists(kSource / "docs" / "labs" / "answers" / (lab + ".md"))) << lab;
    EXPECT_NE(index.find("(" + lab + ".md)"), std::string::npos) << lab;
  }
}

// Lab big-batch: accumulated micro-batches and data-parallel ranks with the same global
// batch end with single's weights, to float rounding; smaller batches do not.
TEST_F(Labs, BigBatchAccumulatedAndDataParallelEndWithSinglesWeights) {
  const fs::path out = run(reduced("big-batch", 512, 64));
  const std::vector<float> single = safetensors_floats(out / "single" / "final.safetensors");
  ASSERT_GT(single.size(), 200000u);  // mlp: 235,146 parameters
  for (const char* arm : {"accum-4", "accum-16", "ddp-2", "ddp-4"}) {
    EXPECT_EQ(summary(out, arm)["steps"], summary(out, "single")["steps"]) << arm;
    const std::vector<float> w = safetensors_floats(out / arm / "final.safetensors");
    ASSERT_EQ(w.size(), single.size()) << arm;
    EXPECT_LT(largest_difference(w, single), 1e-5) << arm;
  }
  // The contrast arm takes four steps of 32 where the others take one of 128.
  EXPECT_GT(largest_difference(safetensors_floats(out / "small-32" / "final.safetensors"), single), 1e-3);
}

// Lab ring-bytes: every rank of a ring all-reduce sends 2(N-1)/N of the gradients' bytes
// a step, for N = 2 and 4, over Gloo and shared memory (within 1 %: buckets are padded
// to a multiple of N).
TEST_F(Labs, RingAllReduceSendsTwoNMinusOneOverNOfTheGradientsPerRank) {
  json spec = reduced("ring-bytes", 256, 64, [](const json& arm) { return arm["ranks"].get<int>() <= 4; });
  spec["train"]["max_steps"] = 2;
  ASSERT_EQ(spec["arms"].size(), 4u);
  const fs::path out = run(spec);
  for (const json& arm : spec["arms"]) {
    const std::string name = arm["name"];
    const int n = arm["ranks"];
    const double gradient_bytes = 4.0 * safetensors_floats(out / name / "final.safetensors").size();
    const double expected = 2.0 * (n - 1) / n * gradient_bytes;
    for (int r = 0; r < n; ++r) {
      const std::vector<json> steps = records_of(out / name / "roles" / ("rank" + std::to_string(r) + ".jsonl"), "step");
      ASSERT_EQ(steps.size(), 2u) << name << " rank " << r;
      for (const json& s : steps) {
        const double sent = s["comm"]["bytes"];
        EXPECT_GE(sent, expected) << name << " rank " << r;
        EXPECT_LT(sent, 1.01 * expected) << name << " rank " << r;
      }
    }
  }
}

// Lab zero-memory: per rank, zero 1 holds 1/N of the optimizer state and zero 2 also 1/N
// of the gradients, plus the bucket being filled (a bucket holds whole tensors: the
// mlp's fc1, 85 % of it). Apart from that bucket, gradients + optimizer state fall by N
// against zero 0's.
TEST_F(Labs, ZeroTwoDividesGradientAndOptimizerMemoryByTheRanks) {
  json spec = reduced("zero-memory", 256, 64);
  spec["train"]["max_steps"] = 2;
  const fs::path out = run(spec);
  auto peak = [&](const std::string& arm, const std::string& tag) {
    return summary(out, arm)["memory_peak_bytes"]["by_tag"][tag].get<double>();
  };
  for (const auto& [n, arm_prefix] : {std::pair{2, "r2-zero"}, std::pair{4, "r4-zero"}}) {
    const std::string prefix = arm_prefix;
    const double opt0 = peak(prefix + "0", "optimizer_state"), grad0 = peak(prefix + "0", "gradients");
    const double opt1 = peak(prefix + "1", "optimizer_state"), grad1 = peak(prefix + "1", "gradients");
    const double opt2 = peak(prefix + "2", "optimizer_state"), grad2 = peak(prefix + "2", "gradients");
    const double bucket = records_of(out / (prefix + "2") / "roles" / "rank0.jsonl", "step")
                              .back()["comm"]["largest_bucket_bytes"].get<double>();
    ASSERT_GT(opt0, 0.0);
    ASSERT_GT(bucket, 0.0);
    // Shards are padded to a multiple of N floats per bucket: a few bytes over 1/N.
    EXPECT_NEAR(opt1, opt0 / n, 64.0) << n;
    EXPECT_NEAR(grad1, grad0 + grad0 / n, 64.0) << n;  // the whole gradient and a copy of its shard
    EXPECT_NEAR(opt2, opt0 / n, 64.0) << n;
    EXPECT_LE(grad2, grad0 / n + bucket + 64.0) << n;
    EXPECT_LT(opt2 + grad2, opt0 + grad0) << n;
    const double ratio = (opt0 + grad0) / (opt2 + grad2 - bucket);
    EXPECT_GT(ratio, 0.95 * n) << n;
    EXPECT_LT(ratio, 1.05 * n) << n;
  }
}

// Lab fedavg-noniid: after the same rounds, FedAvg on label-skewed clients is less
// accurate than on IID ones.
TEST_F(Labs, FedAvgOnNonIidClientsTrailsIidAtTheSameRounds) {
  json spec = reduced("fedavg-noniid", 2000, 500);
  spec["repeats"] = 1;
  for (json& arm : spec["arms"]) {
    arm["rounds"] = 4;
    arm["processes"] = 2;
  }
  const fs::path out = run(spec);
  std::map<std::string, double> final_quality;
  for (const json& arm : spec["arms"]) {
    const json s = summary(out, arm["name"]);
    EXPECT_EQ(s["status"], "finished") << arm["name"];
    EXPECT_EQ(s["steps"], 4) << arm["name"];
    final_quality[arm["name"]] = s["final_quality"];
  }
  EXPECT_LT(final_quality["dir0.1-fedavg"] + 0.05, final_quality["iid-fedavg"]);
  EXPECT_LT(final_quality["dir0.1-fedprox"] + 0.05, final_quality["iid-fedprox"]);
}

}  // namespace

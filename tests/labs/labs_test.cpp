// The course labs (docs/labs/), each run in a reduced form: the lab's own experiment file
// with small synthetic data, fewer steps or arms and one compute thread a process, so that
// each finishes in seconds and its outcome follows from the seed alone. Each test asserts
// the lab's qualitative result on weights, byte counts and memory figures, never on
// timings. Real processes (the launcher and its roles): labelled labs and multirank, run
// serially.

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/cli/cli_util.h"
#include "tests/labs/labs_util.h"

namespace {

namespace fs = std::filesystem;
using cli_util::file_bytes;
using cli_util::quartet;
using cli_util::records_of;
using cli_util::Result;
using cli_util::safetensors_floats;
using labs_util::kSource;
using labs_util::Labs;
using labs_util::largest_difference;
using nlohmann::json;

// The labs: one experiment file each in experiments/labs/.
std::set<std::string> lab_names() {
  std::set<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(kSource / "experiments" / "labs"))
    if (e.path().extension() == ".json") names.insert(e.path().stem().string());
  return names;
}

// Every lab has its experiment, its page, its teacher's answers and a line in the index,
// and its experiment is a valid spec as it stands.
TEST_F(Labs, EveryLabHasItsExperimentPageAnswersAndIndexLine) {
  const std::string index = file_bytes(kSource / "docs" / "labs" / "README.md");
  const std::set<std::string> labs = lab_names();
  EXPECT_GE(labs.size(), 4u);
  for (const std::string& lab : labs) {
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

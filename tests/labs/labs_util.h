#pragma once

// What the lab tests share: a lab's experiment file reduced to seconds (synthetic data,
// one compute thread a process, a subset of its arms), run to its end in a fresh folder.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"

#ifndef QUARTET_SOURCE_DIR
#error "QUARTET_SOURCE_DIR must name the source tree"
#endif

namespace labs_util {

namespace fs = std::filesystem;
using nlohmann::json;

inline const fs::path kSource = QUARTET_SOURCE_DIR;

// The lab's experiment file (experiments/labs/<lab>.json), one compute thread a
// process, and only the arms `keep` accepts.
inline json lab_spec(const std::string& lab,
                     const std::function<bool(const json&)>& keep = [](const json&) { return true; }) {
  std::ifstream in(kSource / "experiments" / "labs" / (lab + ".json"));
  json spec = json::parse(in, nullptr, true, /*ignore_comments=*/true);
  spec["threads"] = 1;
  json arms = json::array();
  for (const json& arm : spec["arms"])
    if (keep(arm)) arms.push_back(arm);
  spec["arms"] = arms;
  return spec;
}

class Labs : public cli_util::FolderTest {
 protected:
  Labs() : FolderTest("labs") {}
  // lab_spec() on synthetic data of `train` and `test` samples.
  static json reduced(const std::string& lab, int train, int test,
                      const std::function<bool(const json&)>& keep = [](const json&) { return true; }) {
    json spec = lab_spec(lab, keep);
    spec["workload"] = {{"name", "synthetic"}, {"model", spec["workload"]["model"]},
                        {"train_samples", train}, {"test_samples", test}};
    return spec;
  }

  // Runs `spec` to its end and returns its run folder.
  fs::path run(const json& spec) {
    const fs::path file = dir_ / "spec.json";
    std::ofstream(file) << spec.dump(2);
    const fs::path out = dir_ / "run";
    const cli_util::Result r = cli_util::quartet({"run", file.string(), "--out", out.string(), "--progress=none"}, dir_);
    EXPECT_EQ(r.code, 0) << r.out;
    return out;
  }

  static json summary(const fs::path& run, const std::string& arm) {
    return json::parse(cli_util::file_bytes(run / arm / "summary.json"));
  }
};

inline double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

}  // namespace labs_util

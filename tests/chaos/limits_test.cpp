// A spec that would start a million processes, a thousand ranks or a hundred thousand
// threads is refused by `quartet validate` and `quartet run` before anything starts, the
// machine's limit named; nothing is left behind.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

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

}  // namespace

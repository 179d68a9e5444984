// The federated regime through the `quartet` binary at scale and its memory figures:
// 200 virtual clients on two pool processes, and the server's record keeping its
// evaluation apart. Real processes, so labelled multirank and run serially.

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using cli_util::file_bytes;
using cli_util::find_role_process;
using cli_util::quartet;
using cli_util::records_of;
using cli_util::Result;
using cli_util::safetensors_floats;
using cli_util::start_quartet;
using cli_util::wait_exit;
using cli_util::wait_for_line;

constexpr int64_t kMiB = 1024 * 1024;

class FederatedCli : public cli_util::FolderTest {
 protected:
  FederatedCli() : FolderTest("fl_cli") {}

  // Runs `spec` into dir_/run; fails the test with the launcher's output otherwise.
  void run(const json& spec) {
    const fs::path path = dir_ / "spec.json";
    std::ofstream(path) << spec.dump(2);
    const Result r = quartet({"run", path.string(), "--out", (dir_ / "run").string(), "--progress=none"}, dir_);
    ASSERT_EQ(r.code, 0) << r.out;
  }

  static json arm(const std::string& name, int clients) {
    // Rounds wait generously: on a loaded machine 200 clients' connections take a while.
    return {{"name", name}, {"regime", "federated"}, {"clients", clients}, {"processes", 2},
            {"fraction", 0.1}, {"rounds", 3}, {"deadline_s", 300}};
  }

  static json spec(const json& arms, int train_samples) {
    return {{"name", "fl-cli"},
            {"workload", {{"name", "synthetic"}, {"model", "mlp"}, {"train_samples", train_samples},
                          {"test_samples", 64}}},
            {"seed", 3},
            {"threads", 1},
            {"train", {{"batch", 8}, {"eval_batch", 64}, {"optimizer", {{"lr", 0.05}}}}},
            {"arms", arms}};
  }

};

// 200 virtual clients (10 samples each, a tenth of them asked per round) complete three
// rounds, and the server's peak RSS exceeds that of a 10-client arm by less than
// 100 MiB: per client it keeps a connection, a handler thread and its sample counts,
// and per round the updates of the clients it asked (20 models of 0.9 MiB here).
TEST_F(FederatedCli, TwoHundredVirtualClientsCompleteThreeRoundsAndTheServerGrowsByLessThan100MiB) {
  run(spec(json::array({arm("k10", 10), arm("k200", 200)}), 2000));
  int64_t server_rss[2] = {0, 0};
  const char* arms[2] = {"k10", "k200"};
  for (int a = 0; a < 2; ++a) {
    const std::vector<json> rounds = records_of(dir_ / "run" / arms[a] / "roles" / "server.jsonl", "step");
    ASSERT_EQ(rounds.size(), 3u) << arms[a];
    for (const json& r : rounds) {
      EXPECT_TRUE(r["round"]["aggregated"].get<bool>()) << r["round"].dump();
      EXPECT_EQ(r["round"]["completed"], a == 0 ? 1 : 20) << r["round"]["dropped"].dump();
      server_rss[a] = std::max(server_rss[a], r["rss_peak"].get<int64_t>());
    }
    const json summary = json::parse(file_bytes(dir_ / "run" / arms[a] / "summary.json"));
    EXPECT_EQ(summary["status"], "finished");
    EXPECT_EQ(summary["memory_peak_bytes"]["by_role"]["server"]["rss"], server_rss[a]);
  }
  const std::vector<json> clients = records_of(dir_ / "run" / "k200" / "roles" / "pool0.jsonl", "client_round");
  EXPECT_FALSE(clients.empty());
  const int64_t growth = server_rss[1] - server_rss[0];
  std::printf("server peak RSS: 10 clients %.1f MiB, 200 clients %.1f MiB, growth %.1f MiB\n",
              double(server_rss[0]) / kMiB, double(server_rss[1]) / kMiB, double(growth) / kMiB);
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "resident memory is AddressSanitizer's (redzones, a quarantine of freed blocks), not the server's";
#endif
  EXPECT_LT(growth, 100 * kMiB);
}

// The server's step record counts its training-side memory only (it trains nothing, so
// no activations), the evaluation's peak is reported beside the evaluation, and the
// pools' records carry the memory of the clients they trained.
TEST_F(FederatedCli, MemoryIsReportedPerProcessWithTheServersEvaluationApart) {
  json a = arm("fed", 4);
  a["fraction"] = 0.5;
  a["rounds"] = 2;
  run(spec(json::array({a}), 256));
  const std::vector<json> rounds = records_of(dir_ / "run" / "fed" / "roles" / "server.jsonl", "step");
  ASSERT_EQ(rounds.size(), 2u);
  for (const json& r : rounds) {
    EXPECT_EQ(r["memory"]["activations"]["peak"], 0) << r["memory"].dump();
    EXPECT_GT(r["eval"]["memory_peak"].get<int64_t>(), r["memory"]["total"]["peak"].get<int64_t>())
        << r["eval"].dump() << " " << r["memory"].dump();
  }
  const std::vector<json> trained = records_of(dir_ / "run" / "fed" / "roles" / "pool0.jsonl", "client_round");
  ASSERT_FALSE(trained.empty());
  for (const json& c : trained) {
    EXPECT_GT(c["memory"]["activations"]["peak"].get<int64_t>(), 0) << c.dump();
    EXPECT_GT(c["memory"]["gradients"]["peak"].get<int64_t>(), 0) << c.dump();
  }
  const json summary = json::parse(file_bytes(dir_ / "run" / "fed" / "summary.json"));
  const json& by_role = summary["memory_peak_bytes"]["by_role"];
  EXPECT_TRUE(by_role.contains("server") && by_role.contains("pool0") && by_role.contains("pool1")) << by_role.dump();
  EXPECT_GT(by_role["pool0"]["total"].get<int64_t>(), by_role["server"]["total"].get<int64_t>());
  EXPECT_NE(file_bytes(dir_ / "run" / "summary.md").find(" · server "), std::string::npos);
}

}  // namespace

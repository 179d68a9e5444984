// Lab split-vs-federated (docs/labs/split-vs-federated.md) in reduced form: the lab's
// eight arms on 400 synthetic samples at batch 20, so that a client holds 200 (K = 2) or
// 40 (K = 10) samples. The bytes come from the server's records, as
// bench/sl_vs_fl_table.py reads them.

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"
#include "tests/labs/labs_util.h"

namespace {

namespace fs = std::filesystem;
using cli_util::records_of;
using nlohmann::json;

class SplitVsFederatedLab : public labs_util::Labs {};

struct ClientBytes {
  double total = 0.0;  // sent + received per client and epoch, headers included
  double cut = 0.0;    // split: activations, gradients and labels alone
};

std::vector<json> server_steps(const fs::path& run, const std::string& arm) {
  return records_of(run / arm / "roles" / "server.jsonl", "step");
}

// A split arm's bytes per client: one turn is one client's pass over its partition.
ClientBytes split_bytes(const fs::path& run, const std::string& arm) {
  ClientBytes b;
  int turns = 0;
  for (const json& step : server_steps(run, arm))
    for (const json& turn : step["split"]["turns"]) {
      EXPECT_TRUE(turn["ok"].get<bool>()) << arm;
      for (const auto& [kind, c] : turn["traffic"].items()) {
        const double bytes = c["sent"].get<double>() + c["received"].get<double>();
        b.total += bytes;
        if (kind == "activations" || kind == "gradients" || kind == "labels") b.cut += bytes;
      }
      ++turns;
    }
  EXPECT_GT(turns, 0) << arm;
  b.total /= turns;
  b.cut /= turns;
  return b;
}

// A federated arm's bytes per client (one round of one local epoch) and the model's size.
std::pair<double, double> federated_bytes(const fs::path& run, const std::string& arm) {
  const std::vector<json> steps = server_steps(run, arm);
  double total = 0.0;
  int clients = 0;
  for (const json& step : steps)
    for (const json& c : step["round"]["clients"]) {
      total += c["bytes_down"].get<double>() + c["bytes_up"].get<double>();
      ++clients;
    }
  EXPECT_GT(clients, 0) << arm;
  return {total / clients, steps.back()["round"]["model_bytes"].get<double>()};
}

// Split's bytes per client fall as 1/K and do not depend on the model behind the cut;
// federated's are twice the model whatever K. So the big model's federated averaging
// costs more than split at both K, the small model's less at K = 2 and more at K = 10.
TEST_F(SplitVsFederatedLab, SplitBytesFallWithClientsFederatedFollowTheModel) {
  json spec = reduced("split-vs-federated", 400, 40);
  spec["train"]["batch"] = 20;
  ASSERT_EQ(spec["arms"].size(), 8u);
  const fs::path out = run(spec);

  std::map<std::string, ClientBytes> split;
  std::map<std::string, std::pair<double, double>> fed;  // per client, model bytes
  for (const std::string model : {"cnn", "wide"})
    for (const std::string k : {"2", "10"}) {
      split[model + k] = split_bytes(out, model + "-split-" + k);
      fed[model + k] = federated_bytes(out, model + "-fed-" + k);
    }

  for (const std::string model : {"cnn", "wide"}) {
    // 200 samples a client against 40: five times the cut's bytes.
    EXPECT_NEAR(split[model + "2"].cut / split[model + "10"].cut, 5.0, 0.05) << model;
    EXPECT_GT(split[model + "2"].total, 4.0 * split[model + "10"].total) << model;
    for (const std::string k : {"2", "10"}) {
      const auto [per_client, model_bytes] = fed[model + k];
      EXPECT_GE(per_client, 2.0 * model_bytes) << model << k;
      EXPECT_LT(per_client, 1.01 * 2.0 * model_bytes) << model << k;
    }
  }
  for (const std::string k : {"2", "10"})  // the same cut: split does not see the head
    EXPECT_NEAR(split["cnn" + k].total / split["wide" + k].total, 1.0, 0.01) << k;
  EXPECT_GT(fed["wide2"].second, 10.0 * fed["cnn2"].second);  // 25.9 MB against 1.7 MB

  EXPECT_GT(split["cnn2"].total, fed["cnn2"].first);     // small model, many samples: federated
  EXPECT_LT(split["cnn10"].total, fed["cnn10"].first);   // small model, few samples: split
  EXPECT_LT(split["wide2"].total, fed["wide2"].first);   // big model: split at both K
  EXPECT_LT(split["wide10"].total, fed["wide10"].first);
}

}  // namespace

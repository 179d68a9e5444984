// Lab federated-ct (docs/labs/federated-ct.md), reduced: the lab's four scanners, four
// clients and phantoms, one round of one local epoch, one repeat. In the full lab the
// scanner partition does not trail IID by more than the seeds' spread (the page says
// so), so the test checks what the lab rests on: who holds which scanner, and training.

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"
#include "tests/labs/labs_util.h"

namespace {

namespace fs = std::filesystem;
using cli_util::records_of;
using nlohmann::json;

class FederatedCtLab : public labs_util::Labs {};

json reduced_federated_ct() {
  json spec =
      labs_util::lab_spec("federated-ct", [](const json& arm) { return arm.value("strategy", "fedavg") == "fedavg"; });
  spec["repeats"] = 1;
  for (json& arm : spec["arms"]) {
    arm["rounds"] = 1;
    arm["local_epochs"] = 1;
  }
  return spec;
}

// Client k of the scanner arm holds exactly scanner k's training volumes (volumes k,
// k + 4, ...), and its recorded histogram says so; the IID arm's count classes.
TEST_F(FederatedCtLab, ScannerClientsHoldOneScannerEachAndTrain) {
  const json spec = reduced_federated_ct();
  ASSERT_EQ(spec["arms"].size(), 2u);
  const fs::path out = run(spec);
  const int64_t scanners = spec["workload"]["scanners"];
  const int64_t train = spec["workload"]["volumes"].get<int64_t>() - spec["workload"]["test_volumes"].get<int64_t>();
  const std::vector<json> p = records_of(out / "scanner-fedavg" / "roles" / "server.jsonl", "partition");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0]["kind"], "scanner");
  EXPECT_EQ(p[0]["counts"], "scanner");
  EXPECT_DOUBLE_EQ(p[0]["mean_max_class_share"].get<double>(), 1.0);
  ASSERT_EQ(p[0]["histograms"].size(), static_cast<size_t>(scanners));
  for (int64_t k = 0; k < scanners; ++k) {
    const json& h = p[0]["histograms"][k];
    EXPECT_EQ(h["samples"], train / scanners) << k;
    for (int64_t s = 0; s < scanners; ++s) EXPECT_EQ(h["labels"][s], s == k ? train / scanners : 0) << k << " " << s;
  }
  EXPECT_EQ(records_of(out / "iid-fedavg" / "roles" / "server.jsonl", "partition")[0]["counts"], "class");
  for (const char* arm : {"iid-fedavg", "scanner-fedavg"}) {
    const json s = summary(out, arm);
    EXPECT_EQ(s["status"], "finished") << arm;
    EXPECT_GT(s["final_quality"].get<double>(), 0.0) << arm;
  }
}

}  // namespace

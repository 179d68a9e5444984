#include "analysis/plan/cluster.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace quartet::analysis::plan {
namespace {

using nlohmann::json;

std::string shipped(const std::string& name) { return std::string(QUARTET_SOURCE_DIR) + "/clusters/" + name + ".json"; }

json minimal() {
  return json::parse(R"({
    "name": "t", "nodes": 2, "devices_per_node": 4, "host_cores": 16,
    "device": { "name": "d", "peak_tflops": { "fp32": 10, "bf16": 100 }, "memory_gib": 16,
                "memory_bandwidth_gb_s": 1000 },
    "intra_link": { "bandwidth_gbit_s": 800, "latency_us": 2 },
    "inter_link": { "bandwidth_gbit_s": 100, "latency_us": 5, "nics_per_node": 2 } })");
}

std::string error_of(const json& j) {
  try {
    parse_cluster(j);
  } catch (const ClusterError& e) {
    return e.what();
  }
  return "";
}

TEST(ClusterProfile, EveryShippedProfileParsesAndRoundTrips) {
  for (const auto& entry : std::filesystem::directory_iterator(std::string(QUARTET_SOURCE_DIR) + "/clusters")) {
    const ClusterProfile p = load_cluster_file(entry.path().string());
    EXPECT_EQ(cluster_json(parse_cluster(cluster_json(p))), cluster_json(p)) << entry.path();
  }
}

TEST(ClusterProfile, UnitsAreConvertedToSi) {
  const ClusterProfile p = parse_cluster(minimal());
  EXPECT_DOUBLE_EQ(p.device.peak("bf16"), 100e12);
  EXPECT_DOUBLE_EQ(p.device.memory_bytes, 16.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(p.device.memory_bandwidth_bytes_per_s, 1e12);
  EXPECT_DOUBLE_EQ(p.intra.bandwidth_bytes_per_s, 100e9);  // 800 Gbit/s
  EXPECT_DOUBLE_EQ(p.inter.latency_s, 5e-6);
  EXPECT_EQ(p.inter.nics_per_node, 2);
  EXPECT_EQ(p.devices(), 8);
}

TEST(ClusterProfile, DgxH100HasTheVendorFigures) {
  const ClusterProfile p = load_cluster_file(shipped("dgx-h100"));
  EXPECT_EQ(p.devices(), 16);
  EXPECT_DOUBLE_EQ(p.device.peak("bf16"), 989.4e12);
  EXPECT_DOUBLE_EQ(p.intra.bandwidth_bytes_per_s, 450e9);  // 900 GB/s both ways
  EXPECT_EQ(p.inter.nics_per_node, 8);
}

TEST(ClusterProfile, PhonesHaveAPopulation) {
  const ClusterProfile p = load_cluster_file(shipped("phones-lte"));
  ASSERT_TRUE(p.population);
  EXPECT_EQ(p.population->clients, 100000);
  EXPECT_EQ(p.population->down_bytes_per_s.kind, "lognormal");
  EXPECT_DOUBLE_EQ(p.population->down_bytes_per_s.a, 30e6 / 8);
  EXPECT_DOUBLE_EQ(p.population->dropout, 0.1);
}

TEST(ClusterProfileHostile, MissingFieldIsNamed) {
  json j = minimal();
  j["device"].erase("memory_gib");
  EXPECT_EQ(error_of(j), "cluster.device.memory_gib: missing (docs/plan.md lists the fields)");
}

TEST(ClusterProfileHostile, NegativePeakIsNamed) {
  json j = minimal();
  j["device"]["peak_tflops"]["bf16"] = -1;
  EXPECT_EQ(error_of(j), "cluster.device.peak_tflops.bf16: expected a number > 0, got -1");
}

TEST(ClusterProfileHostile, UnknownFieldIsNamedWithTheAllowedOnes) {
  json j = minimal();
  j["inter_link"]["bandwith_gbit_s"] = 5;
  EXPECT_NE(error_of(j).find("cluster.inter_link.bandwith_gbit_s: unknown field; allowed here: bandwidth_gbit_s"),
            std::string::npos)
      << error_of(j);
}

TEST(ClusterProfileHostile, WrongTypesAndRangesAreRefused) {
  json j = minimal();
  j["nodes"] = 0;
  EXPECT_EQ(error_of(j), "cluster.nodes: expected an integer ≥ 1, got 0");
  j = minimal();
  j["device"]["efficiency"] = {{"matmul", 4.5}};
  EXPECT_NE(error_of(j).find("cluster.device.efficiency.matmul: expected a fraction"), std::string::npos);
  j = minimal();
  j["device"]["kind"] = "tpu";
  EXPECT_EQ(error_of(j), "cluster.device.kind: expected gpu or cpu, got \"tpu\"");
  j = minimal();
  j["device"]["peak_tflops"].erase("fp32");
  EXPECT_EQ(error_of(j), "cluster.device.peak_tflops.fp32: missing (every device has an fp32 peak)");
  EXPECT_EQ(error_of(json::array()), "cluster: expected an object, got []");
}

// What calibrate measures beyond the peaks: what further cores add by op class, and the
// engine's elementwise ops; both round-trip, and are checked.
TEST(ClusterProfile, FurtherCoresAndElementwiseOpsRoundTrip) {
  json j = minimal();
  j["device"]["kind"] = "cpu";
  j["device"]["efficiency"] = {{"matmul", 0.5}, {"further_cores", {{"matmul", 0.8}, {"conv", 0.7}}}};
  j["device"]["elementwise_ops"] = {{"gelu", {{"ns", 4.5}, {"further_cores", 0.75}}}, {"relu", {{"ns", 0.8}}}};
  const ClusterProfile c = parse_cluster(j);
  EXPECT_DOUBLE_EQ(c.device.efficiency.further_cores.matmul, 0.8);
  EXPECT_DOUBLE_EQ(c.device.efficiency.further_cores.attention, 1.0);
  EXPECT_DOUBLE_EQ(c.device.elementwise_ops.at("gelu").nanoseconds_per_element, 4.5);
  EXPECT_DOUBLE_EQ(c.device.elementwise_ops.at("gelu").further_cores, 0.75);
  EXPECT_DOUBLE_EQ(c.device.elementwise_ops.at("relu").further_cores, 1.0);
  const ClusterProfile again = parse_cluster(cluster_json(c));
  EXPECT_DOUBLE_EQ(again.device.elementwise_ops.at("gelu").nanoseconds_per_element, 4.5);
  EXPECT_DOUBLE_EQ(again.device.efficiency.further_cores.conv, 0.7);
}

TEST(ClusterProfileHostile, FurtherCoresAndElementwiseOpsAreChecked) {
  json j = minimal();
  j["device"]["efficiency"] = {{"further_cores", {{"conv", 1.5}}}};
  EXPECT_EQ(error_of(j), "cluster.device.efficiency.further_cores.conv: expected a fraction in (0, 1], got 1.500000");
  j = minimal();
  j["device"]["elementwise_ops"] = {{"softplus", {{"ns", 1}}}};
  EXPECT_NE(error_of(j).find("cluster.device.elementwise_ops.softplus: unknown field; allowed here: "), std::string::npos)
      << error_of(j);
  j = minimal();
  j["device"]["elementwise_ops"] = {{"gelu", {{"ns", -1}}}};
  EXPECT_EQ(error_of(j), "cluster.device.elementwise_ops.gelu.ns: expected a number > 0, got -1");
}

TEST(ClusterProfileHostile, UnknownPrecisionNamesTheKnownOnes) {
  const ClusterProfile p = parse_cluster(minimal());
  EXPECT_THROW(
      {
        try {
          p.device.peak("fp8");
        } catch (const ClusterError& e) {
          EXPECT_STREQ(e.what(), "precision fp8: device d has no peak for it; it has bf16, fp32");
          throw;
        }
      },
      ClusterError);
}

}  // namespace
}  // namespace quartet::analysis::plan

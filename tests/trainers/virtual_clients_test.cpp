#include <gtest/gtest.h>

#include "trainers/virtual_clients.h"

namespace quartet::trainers {
namespace {

TEST(VirtualClients, ClientRolesParseOnlyWhenWellFormed) {
  EXPECT_EQ(parse_client_role("fl-client/7", "fl-client/"), 7);
  EXPECT_EQ(parse_client_role("sl-client/0", "sl-client/"), 0);
  EXPECT_EQ(parse_client_role("fl-client/", "fl-client/"), -1);
  EXPECT_EQ(parse_client_role("fl-client/-3", "fl-client/"), -1);
  EXPECT_EQ(parse_client_role("fl-client/3x", "fl-client/"), -1);
  EXPECT_EQ(parse_client_role("sl-client/3", "fl-client/"), -1);
  EXPECT_EQ(parse_client_role("fl-client/99999999999999999999999", "fl-client/"), -1);
}

TEST(VirtualClients, PoolRolesAreCheckedAgainstTheProcessCount) {
  EXPECT_EQ(pool_index("pool0", 2, "split"), 0);
  EXPECT_EQ(pool_index("pool1", 2, "split"), 1);
  for (const char* bad : {"pool2", "pool", "pool-1", "server2", "pool1 "}) {
    try {
      pool_index(bad, 2, "split");
      ADD_FAILURE() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), std::string("split: no role \"") + bad +
                                           "\"; the roles are server and pool0..pool1");
    }
  }
}

TEST(VirtualClients, PartitionTableFillsDefaultsAndReadsTheArmsFields) {
  nlohmann::json none = nlohmann::json::object();
  const workloads::PartitionSpec d = partition_table().parse(none, "spec.arms[0].partition");
  EXPECT_EQ(d.kind, "iid");
  EXPECT_EQ(none["kind"], "iid");  // filled, so the spec as run says what ran
  nlohmann::json given = {{"kind", "dirichlet"}, {"alpha", 0.1}};
  const workloads::PartitionSpec p = partition_table().parse(given, "spec.arms[0].partition");
  EXPECT_EQ(p.kind, "dirichlet");
  EXPECT_DOUBLE_EQ(p.alpha, 0.1);
  nlohmann::json bad = {{"kind", "random"}};
  EXPECT_THROW(partition_table().parse(bad, "spec.arms[0].partition"), SettingsError);
}

}  // namespace
}  // namespace quartet::trainers

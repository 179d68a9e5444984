// Collectives and the coordinator with real processes: ranks rendezvous through a
// coordinator over TCP, 200 clients at once, and two "hosts" as network namespaces
// joined by a veth pair. Every child is reaped, whatever happens.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/transport/multirank/namespaces.h"
#include "tests/transport/multirank/process.h"
#include "transport/connection.h"
#include "transport/coordinator.h"

#ifndef QUARTET_TRANSPORT_HELPER
#error "QUARTET_TRANSPORT_HELPER must name the helper binary"
#endif

namespace quartet::transport {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::TwoNamespaces;

const std::string kHelper = QUARTET_TRANSPORT_HELPER;

struct Recorded {
  std::mutex mutex;
  std::map<std::string, std::vector<std::string>> records;  // by role
  std::vector<std::string> vanished;

  void attach(CoordinatorOptions& o) {
    o.on_record = [this](const RoleId& from, std::string_view r) {
      std::lock_guard lock(mutex);
      records[from.role].emplace_back(r);
    };
    o.on_vanished = [this](const RoleId& who, const std::string& why) {
      std::lock_guard lock(mutex);
      vanished.push_back(who.name() + ": " + why);
    };
  }
};

void expect_ranks_agree_through_the_coordinator(int ranks) {
  Recorded seen;
  CoordinatorOptions o;
  o.heartbeat_timeout = 60s;
  seen.attach(o);
  Coordinator coordinator(o);
  coordinator.declare_arm("multirank", ranks);
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int r = 0; r < ranks; ++r)
    children.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{kHelper, "rank", "--coordinator", coordinator.address(), "--rank",
                                 std::to_string(r), "--ranks", std::to_string(ranks)},
        std::vector<std::string>{"QUARTET_TOKEN=" + coordinator.token()}));
  for (int r = 0; r < ranks; ++r) EXPECT_TRUE(children[r]->finished_ok(240s)) << "rank " << r << " failed";
  std::lock_guard lock(seen.mutex);
  for (int r = 0; r < ranks; ++r) {
    const auto& rs = seen.records["rank" + std::to_string(r)];
    ASSERT_EQ(rs.size(), 1u) << "rank " << r;
    EXPECT_NE(rs[0].find(R"("checks": "ok")"), std::string::npos) << rs[0];
    EXPECT_NE(rs[0].find(R"("size": )" + std::to_string(ranks)), std::string::npos) << rs[0];
  }
  EXPECT_TRUE(seen.vanished.empty()) << seen.vanished.front();
}

TEST(MultiProcess, GlooCollectivesTwoProcessesThroughTheCoordinator) { expect_ranks_agree_through_the_coordinator(2); }
TEST(MultiProcess, GlooCollectivesFourProcessesThroughTheCoordinator) {
  expect_ranks_agree_through_the_coordinator(4);
}

TEST(MultiProcess, KilledRankIsReportedVanishedByName) {
  Recorded seen;
  CoordinatorOptions o;
  o.heartbeat_timeout = 60s;  // the dropped connection, not the deadline, reveals it
  seen.attach(o);
  Coordinator coordinator(o);
  coordinator.declare_arm("multirank", 2);
  // Rank 1 never comes, so rank 0 waits in the rendezvous until it is killed.
  ChildProcess rank0({kHelper, "rank", "--coordinator", coordinator.address(), "--rank", "0", "--ranks", "2"},
                     {"QUARTET_TOKEN=" + coordinator.token()});
  ASSERT_TRUE(coordinator.wait_for_roles("multirank", 1, 60s));
  kill(rank0.pid(), SIGKILL);
  rank0.wait(30s);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    {
      std::lock_guard lock(seen.mutex);
      if (!seen.vanished.empty()) break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the killed rank was never reported";
    std::this_thread::sleep_for(20ms);
  }
  std::lock_guard lock(seen.mutex);
  EXPECT_NE(seen.vanished[0].find("multirank/rank0 (rank 0)"), std::string::npos) << seen.vanished[0];
}

int64_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      int64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    std::getline(in, key);
  }
  return -1;
}

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// The coordinator (this process) with 10 and then 200 client connections open at once,
// the clients in two helper processes. Every record is counted; the coordinator's
// resident memory grows by less than 50 MB from 10 to 200 connections.
TEST(MultiProcess, CoordinatorKeepsEveryRecordOf200ConnectionsInBoundedMemory) {
  constexpr int kFirst = 10, kTotal = 200, kRecords = 50;
  Recorded seen;
  CoordinatorOptions o;
  o.heartbeat_timeout = 120s;
  seen.attach(o);
  Coordinator coordinator(o);
  const std::vector<std::string> env{"QUARTET_TOKEN=" + coordinator.token()};
  auto clients = [&](int first, int count, const std::string& go) {
    return std::make_unique<ChildProcess>(
        std::vector<std::string>{kHelper, "clients", "--coordinator", coordinator.address(), "--first",
                                 std::to_string(first), "--count", std::to_string(count), "--records",
                                 std::to_string(kRecords), "--go", go},
        env);
  };
  auto registered = [&](int n) { return coordinator.wait_for_roles("clients", n, 120s); };

  auto a = clients(0, kFirst, "go/a");
  ASSERT_TRUE(registered(kFirst));
  coordinator.kv_set("go/a", "1");
  ASSERT_TRUE(wait_until([&] { return coordinator.records_received() == kFirst * kRecords; }, 120s));
  const int64_t rss10 = rss_bytes();

  auto b = clients(kFirst, kTotal - kFirst, "go/b");
  ASSERT_TRUE(registered(kTotal));
  coordinator.kv_set("go/b", "1");
  ASSERT_TRUE(wait_until([&] { return coordinator.records_received() == kTotal * kRecords; }, 120s))
      << coordinator.records_received() << " records of " << kTotal * kRecords;
  const int64_t rss200 = rss_bytes();
  int connected = 0;
  for (const auto& s : coordinator.roles()) connected += s.connected;
  EXPECT_EQ(connected, kTotal) << "all connections open at once";

  coordinator.kv_set("release", "1");
  EXPECT_TRUE(a->finished_ok(120s));
  EXPECT_TRUE(b->finished_ok(120s));

  const double growth_mb = static_cast<double>(rss200 - rss10) / (1 << 20);
  std::cout << "coordinator RSS with " << kFirst << " connections: " << rss10 / (1 << 20) << " MiB; with " << kTotal
            << ": " << rss200 / (1 << 20) << " MiB; growth " << growth_mb << " MiB\n";
  RecordProperty("rss_10_connections_bytes", std::to_string(rss10));
  RecordProperty("rss_200_connections_bytes", std::to_string(rss200));
  EXPECT_LT(growth_mb, 50.0);

  EXPECT_EQ(coordinator.records_received(), kTotal * kRecords);
  std::lock_guard lock(seen.mutex);
  EXPECT_EQ(seen.records.size(), static_cast<size_t>(kTotal));
  for (const auto& [role, rs] : seen.records) EXPECT_EQ(rs.size(), static_cast<size_t>(kRecords)) << role;
  EXPECT_TRUE(seen.vanished.empty()) << seen.vanished.front();
}

// ---------------------------------------------------------------------------------
// Two hosts: network namespaces (tests/transport/multirank/namespaces.h).

TEST(TwoHosts, GlooAllReduceAcrossTwoNetworkNamespaces) {
  TwoNamespaces ns;
  if (const std::string why = ns.create(); !why.empty()) GTEST_SKIP() << why;

  const std::string token = make_token();
  const std::vector<std::string> env{"QUARTET_TOKEN=" + token};
  // The coordinator listens on the first host's address only.
  ChildProcess coordinator({"ip", "netns", "exec", ns.a(), kHelper, "coordinator", "--host", "192.0.2.1", "--ranks",
                            "2", "--timeout", "180"},
                           env, /*capture_stdout=*/true);
  const auto line = coordinator.read_line(60s);
  ASSERT_TRUE(line && line->rfind("port ", 0) == 0) << "the coordinator did not start";
  const std::string address = "192.0.2.1:" + line->substr(5);

  ChildProcess rank0({"ip", "netns", "exec", ns.a(), kHelper, "rank", "--coordinator", address, "--rank", "0",
                      "--ranks", "2", "--gloo-host", "192.0.2.1"},
                     env);
  ChildProcess rank1({"ip", "netns", "exec", ns.b(), kHelper, "rank", "--coordinator", address, "--rank", "1",
                      "--ranks", "2", "--gloo-host", "192.0.2.2"},
                     env);
  EXPECT_TRUE(rank0.finished_ok(240s)) << "rank 0 (192.0.2.1) failed";
  EXPECT_TRUE(rank1.finished_ok(240s)) << "rank 1 (192.0.2.2) failed";
  // Both records reached the coordinator across the veth pair.
  int records = 0;
  while (auto l = coordinator.read_line(5s)) records += l->rfind("record ", 0) == 0;
  EXPECT_EQ(records, 2);
  EXPECT_TRUE(coordinator.finished_ok(60s)) << "the coordinator saw a rank vanish or time out";
}

}  // namespace
}  // namespace quartet::transport

// The coordinator over real sockets on 127.0.0.1, with roles as threads of this process.

#include "transport/coordinator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "transport/collectives.h"
#include "transport/connection.h"
#include "transport/gloo_collectives.h"
#include "transport/messages.h"
#include "transport/store.h"

namespace quartet::transport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

ClientOptions client_options(const Coordinator& c, const std::string& arm, const std::string& role, int rank = -1) {
  ClientOptions o;
  o.host = c.host();
  o.port = c.port();
  o.token = c.token();
  o.arm = arm;
  o.role = role;
  o.requested_rank = rank;
  return o;
}

// What the callbacks saw, for tests to wait on.
struct Events {
  std::mutex mutex;
  std::condition_variable cv;
  std::map<std::string, std::vector<std::string>> records;  // by role
  std::vector<std::pair<RoleId, std::string>> vanished;

  void attach(CoordinatorOptions& o) {
    o.on_record = [this](const RoleId& from, std::string_view r) {
      std::lock_guard lock(mutex);
      records[from.role].emplace_back(r);
    };
    o.on_vanished = [this](const RoleId& who, const std::string& why) {
      {
        std::lock_guard lock(mutex);
        vanished.emplace_back(who, why);
      }
      cv.notify_all();
    };
  }
  bool wait_vanished(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, timeout, [&] { return vanished.size() >= n; });
  }
};

TEST(Coordinator, ListensOnLoopbackWithAFreshPortAndToken) {
  Coordinator c({});
  EXPECT_EQ(c.host(), "127.0.0.1");
  EXPECT_GT(c.port(), 0);
  EXPECT_EQ(c.token().size(), 32u);
  EXPECT_EQ(c.address(), "127.0.0.1:" + std::to_string(c.port()));
}

TEST(Coordinator, KvSetByOneClientIsSeenByAnother) {
  Coordinator c({});
  CoordinatorClient a(client_options(c, "arm", "a"));
  CoordinatorClient b(client_options(c, "arm", "b"));
  a.kv_set("gloo/0", std::string("addr\0with nul", 13));
  EXPECT_EQ(b.kv_get("gloo/0", 0ms), std::string("addr\0with nul", 13));
  EXPECT_EQ(c.kv_get("gloo/0", 0ms), std::string("addr\0with nul", 13));
  c.kv_set("nccl/id", "xyz");
  EXPECT_EQ(a.kv_wait("nccl/id", 1s), "xyz");
}

TEST(Coordinator, KvGetWaitsForALaterSet) {
  Coordinator c({});
  CoordinatorClient a(client_options(c, "arm", "a"));
  CoordinatorClient b(client_options(c, "arm", "b"));
  std::optional<std::string> got;
  const auto start = Clock::now();
  std::thread waiter([&] { got = a.kv_get("late", 30s); });
  std::this_thread::sleep_for(200ms);
  b.kv_set("late", "here");
  waiter.join();
  EXPECT_EQ(got, "here");
  EXPECT_LT(Clock::now() - start, 20s);
}

TEST(Coordinator, KvGetTimesOutWhenTheKeyNeverComes) {
  Coordinator c({});
  CoordinatorClient a(client_options(c, "arm", "a"));
  const auto start = Clock::now();
  EXPECT_EQ(a.kv_get("never", 300ms), std::nullopt);
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, 290ms);
  EXPECT_LT(waited, 10s);
  try {
    a.kv_wait("never", 50ms);
    FAIL() << "kv_wait returned a key nobody set";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
  }
  // The connection is still good after timeouts.
  a.kv_set("k", "v");
  EXPECT_EQ(a.kv_get("k", 0ms), "v");
  EXPECT_EQ(c.kv_get("never", 10ms), std::nullopt);
}

TEST(Coordinator, WrongTokenIsRefused) {
  CoordinatorOptions o;
  o.heartbeat_timeout = 30s;
  Coordinator c(o);
  ClientOptions co = client_options(c, "arm", "intruder");
  co.token = std::string(32, '0');
  try {
    CoordinatorClient bad(co);
    FAIL() << "a wrong token was let in";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "the coordinator at " + c.address() + " refused role intruder: wrong token");
  }
  EXPECT_TRUE(c.roles().empty());
  // The coordinator still serves the right token.
  CoordinatorClient good(client_options(c, "arm", "rank0"));
  EXPECT_EQ(good.rank(), 0);
}

// The coordinator may close before the role's registration frame arrives, so the role's
// send can fail (reset, broken pipe) before it reads the refusal: it must still say what
// the coordinator said. Many tries, so that both orders happen.
TEST(Coordinator, ARolePastMaxConnectionsIsToldSoNotABrokenPipe) {
  CoordinatorOptions o;
  o.max_connections = 2;
  Coordinator c(o);
  CoordinatorClient a(client_options(c, "arm", "a"));
  CoordinatorClient b(client_options(c, "arm", "b"));
  for (int i = 0; i < 50; ++i) {
    try {
      CoordinatorClient late(client_options(c, "arm", "late"));
      FAIL() << "a third role got past max_connections = 2";
    } catch (const std::runtime_error& e) {
      ASSERT_EQ(std::string(e.what()),
                "the coordinator at " + c.address() + " refused role late: too many connections (2 in use)");
    }
  }
  EXPECT_EQ(c.roles().size(), 2u);
}

// A stand-in coordinator that refuses its first `busy` connections as the server does
// when too many connections wait for their hello, then registers the next one.
class BusyCoordinator {
 public:
  explicit BusyCoordinator(int busy) : busy_(busy), acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}) {
    thread_ = std::thread([this] { serve(); });
  }
  ~BusyCoordinator() {
    stop_ = true;
    try {
      Connection::connect("127.0.0.1", port(), std::chrono::seconds(5));  // wakes accept()
    } catch (const std::exception&) {
    }
    thread_.join();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  int connections() const { return connections_; }

 private:
  void serve() {
    while (!stop_) {
      Connection connection(acceptor_.accept());
      if (stop_) return;
      ++connections_;
      if (connections_ <= busy_) {
        send_error_and_close(connection, "busy: too many connections waiting for their hello (at most 1 in all)",
                             std::chrono::seconds(5));
        continue;
      }
      try {
        connection.receive(std::chrono::seconds(30));  // hello
        connection.receive(std::chrono::seconds(30));  // registration
        send_message(connection, MessageType::welcome, Welcome{3, 4, "{}"}, std::chrono::seconds(30));
        connection.receive(std::chrono::seconds(30));  // goodbye
        connection.send(MessageType::shutdown, std::span<const std::byte>{}, std::chrono::seconds(30));
      } catch (const std::exception&) {
      }
    }
  }

  const int busy_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

ClientOptions busy_client_options(const BusyCoordinator& busy) {
  ClientOptions o;
  o.port = busy.port();
  o.token = make_token();
  o.arm = "arm";
  o.role = "r";
  o.heartbeat_interval = 0ms;
  return o;
}

TEST(Coordinator, ARoleRefusedAsBusyTriesAgain) {
  BusyCoordinator busy(3);
  CoordinatorClient client(busy_client_options(busy));
  EXPECT_EQ(client.rank(), 3);
  EXPECT_EQ(busy.connections(), 4);
  client.leave();
}

TEST(Coordinator, ARoleStillBusyAtItsTimeoutSaysWhy) {
  BusyCoordinator busy(1000000);
  ClientOptions o = busy_client_options(busy);
  o.timeout = 300ms;
  const auto start = Clock::now();
  try {
    CoordinatorClient client(o);
    FAIL() << "joined a coordinator that is always busy";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "the coordinator at 127.0.0.1:" + std::to_string(busy.port()) +
                                         " refused role r: busy: too many connections waiting for their hello (at "
                                         "most 1 in all)");
  }
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_GT(busy.connections(), 1);
}

TEST(Coordinator, TokenComesFromTheEnvironment) {
  Coordinator c({});
  ClientOptions co = client_options(c, "arm", "r");
  co.token.clear();
  ::unsetenv("QUARTET_TOKEN");
  EXPECT_THROW(CoordinatorClient missing(co), std::invalid_argument);
  ::setenv("QUARTET_TOKEN", c.token().c_str(), 1);
  CoordinatorClient fromenv(co);
  EXPECT_EQ(fromenv.rank(), 0);
  ::unsetenv("QUARTET_TOKEN");
}

TEST(Coordinator, RanksAreGivenInOrderOrAsRequested) {
  Coordinator c({});
  c.declare_arm("ddp-3", 3, R"({"bucket_mb": 4})");
  CoordinatorClient x(client_options(c, "ddp-3", "x", 2));
  CoordinatorClient y(client_options(c, "ddp-3", "y"));
  CoordinatorClient z(client_options(c, "ddp-3", "z"));
  EXPECT_EQ(x.rank(), 2);
  EXPECT_EQ(y.rank(), 0);
  EXPECT_EQ(z.rank(), 1);
  EXPECT_EQ(y.world_size(), 3);
  EXPECT_EQ(y.settings_json(), R"({"bucket_mb": 4})");
  try {
    CoordinatorClient w(client_options(c, "ddp-3", "w"));
    FAIL() << "a fourth role joined a three-rank arm";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("full"), std::string::npos) << e.what();
  }
  // Another arm counts from 0 again; an undeclared arm has no limit.
  CoordinatorClient other(client_options(c, "other", "a"));
  EXPECT_EQ(other.rank(), 0);
  EXPECT_EQ(other.world_size(), 0);
  EXPECT_TRUE(c.wait_for_roles("ddp-3", 3, 1s));
  EXPECT_EQ(c.roles().size(), 4u);
}

TEST(Coordinator, RequestedRankTakenIsRefusedNamingTheHolder) {
  Coordinator c({});
  CoordinatorClient a(client_options(c, "arm", "first", 1));
  try {
    CoordinatorClient b(client_options(c, "arm", "second", 1));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("taken by role first"), std::string::npos) << e.what();
  }
}

TEST(Coordinator, SameRoleTwiceIsRefusedButARestartGetsItsRankBack) {
  Coordinator c({});
  auto a = std::make_unique<CoordinatorClient>(client_options(c, "arm", "worker"));
  CoordinatorClient other(client_options(c, "arm", "other"));
  EXPECT_EQ(a->rank(), 0);
  EXPECT_THROW(CoordinatorClient twin(client_options(c, "arm", "worker")), std::runtime_error);
  a->leave();
  a.reset();
  CoordinatorClient again(client_options(c, "arm", "worker"));
  EXPECT_EQ(again.rank(), 0);
}

TEST(Coordinator, RecordsAreHandedOnInOrder) {
  Events events;
  CoordinatorOptions o;
  events.attach(o);
  Coordinator c(o);
  {
    CoordinatorClient a(client_options(c, "arm", "rank0"));
    for (int i = 0; i < 1000; ++i) a.send_record(R"({"step": )" + std::to_string(i) + "}");
    a.leave();  // returns once everything sent before was handled
  }
  EXPECT_EQ(c.records_received(), 1000);
  std::lock_guard lock(events.mutex);
  ASSERT_EQ(events.records["rank0"].size(), 1000u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(events.records["rank0"][i], R"({"step": )" + std::to_string(i) + "}");
  EXPECT_TRUE(events.vanished.empty());
}

TEST(Coordinator, RecordFromAnUnregisteredConnectionIsRefused) {
  Coordinator c({});
  CoordinatorClient anonymous(client_options(c, "", ""));
  EXPECT_EQ(anonymous.rank(), -1);
  anonymous.send_record("{}");
  EXPECT_THROW(anonymous.kv_get("x", 0ms), std::exception);
  EXPECT_EQ(c.records_received(), 0);
}

TEST(Coordinator, TwoHundredConcurrentRecordSendersAreAllCounted) {
  Events events;
  CoordinatorOptions o;
  o.heartbeat_timeout = 60s;
  events.attach(o);
  Coordinator c(o);
  constexpr int kClients = 200, kRecords = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  std::atomic<int> connected{0};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      try {
        CoordinatorClient cl(client_options(c, "fed", "client" + std::to_string(i)));
        // Everyone connected before anyone sends: 200 connections at once.
        connected.fetch_add(1);
        while (connected.load() < kClients) std::this_thread::sleep_for(5ms);
        for (int r = 0; r < kRecords; ++r)
          cl.send_record(R"({"client": )" + std::to_string(i) + R"(, "step": )" + std::to_string(r) + "}");
        cl.leave();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "client " << i << ": " << e.what();
        failures.fetch_add(1);
        connected.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(c.records_received(), kClients * kRecords);
  std::lock_guard lock(events.mutex);
  EXPECT_EQ(events.records.size(), static_cast<size_t>(kClients));
  for (const auto& [role, rs] : events.records) EXPECT_EQ(rs.size(), static_cast<size_t>(kRecords)) << role;
  EXPECT_TRUE(events.vanished.empty());
}

TEST(Coordinator, SilentRoleIsReportedVanishedByName) {
  Events events;
  CoordinatorOptions o;
  o.heartbeat_timeout = 1s;
  events.attach(o);
  Coordinator c(o);
  ClientOptions lively = client_options(c, "ddp-2", "rank0");
  lively.heartbeat_interval = 100ms;
  ClientOptions silent = client_options(c, "ddp-2", "rank1");
  silent.heartbeat_interval = 0ms;  // never beats: as if its process hung
  CoordinatorClient a(lively);
  CoordinatorClient b(silent);
  ASSERT_TRUE(events.wait_vanished(1, 20s));
  std::this_thread::sleep_for(1500ms);  // past the deadline again: the lively one stays
  std::lock_guard lock(events.mutex);
  ASSERT_EQ(events.vanished.size(), 1u);
  EXPECT_EQ(events.vanished[0].first.role, "rank1");
  EXPECT_EQ(events.vanished[0].first.arm, "ddp-2");
  EXPECT_EQ(events.vanished[0].first.rank, 1);
  EXPECT_NE(events.vanished[0].second.find("no heartbeat"), std::string::npos) << events.vanished[0].second;
}

TEST(Coordinator, HeartbeatsKeepARoleAliveDuringALongKvWait) {
  Events events;
  CoordinatorOptions o;
  o.heartbeat_timeout = 1s;
  events.attach(o);
  Coordinator c(o);
  ClientOptions co = client_options(c, "arm", "waiter");
  co.heartbeat_interval = 100ms;
  CoordinatorClient a(co);
  EXPECT_EQ(a.kv_get("slow", 2500ms), std::nullopt);  // the reply alone comes after the deadline
  std::lock_guard lock(events.mutex);
  EXPECT_TRUE(events.vanished.empty());
}

TEST(Coordinator, DroppedConnectionIsReportedVanished) {
  Events events;
  CoordinatorOptions o;
  events.attach(o);
  Coordinator c(o);
  CoordinatorClient a(client_options(c, "split", "client3"));
  a.abandon();
  ASSERT_TRUE(events.wait_vanished(1, 20s));
  std::lock_guard lock(events.mutex);
  EXPECT_EQ(events.vanished[0].first.name(), "split/client3 (rank 0)");
  EXPECT_NE(events.vanished[0].second.find("without a goodbye"), std::string::npos) << events.vanished[0].second;
}

TEST(Coordinator, RoleThatLeavesIsNotReportedVanished) {
  Events events;
  CoordinatorOptions o;
  events.attach(o);
  Coordinator c(o);
  {
    CoordinatorClient a(client_options(c, "arm", "polite"));
  }  // the destructor says goodbye
  ASSERT_EQ(c.roles().size(), 1u);
  EXPECT_TRUE(c.roles()[0].left);
  EXPECT_FALSE(events.wait_vanished(1, 300ms));
}

TEST(Coordinator, ParseHostPort) {
  EXPECT_EQ(parse_host_port("127.0.0.1:4000"), (std::pair<std::string, uint16_t>{"127.0.0.1", 4000}));
  EXPECT_EQ(parse_host_port("node-7:80"), (std::pair<std::string, uint16_t>{"node-7", 80}));
  EXPECT_THROW(parse_host_port("127.0.0.1"), std::invalid_argument);
  EXPECT_THROW(parse_host_port("h:0"), std::invalid_argument);
  EXPECT_THROW(parse_host_port("h:99999"), std::invalid_argument);
  EXPECT_THROW(parse_host_port(":80"), std::invalid_argument);
}

TEST(CoordinatorStore, GlooRanksRendezvousThroughTheCoordinator) {
  Coordinator c({});
  constexpr int kRanks = 2;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < kRanks; ++i) {
    threads.emplace_back([&, i] {
      try {
        CoordinatorClient client(client_options(c, "ddp", "rank" + std::to_string(i), i));
        CoordinatorStore store(client, "ddp/gloo/", 60s);
        GlooOptions go;
        go.timeout = 60s;
        auto coll = make_gloo_collectives(store, client.rank(), kRanks, go);
        std::vector<float> data(100000, static_cast<float>(client.rank() + 1));
        coll->all_reduce(data);
        for (float v : data) ASSERT_EQ(v, 3.0f);
        ok.fetch_add(1);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << i << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kRanks);
  EXPECT_TRUE(c.kv_get("ddp/gloo/0", 0ms).has_value());
}

}  // namespace
}  // namespace quartet::transport

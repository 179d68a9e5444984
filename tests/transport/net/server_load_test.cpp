// Many connections at once; labelled multirank and run serially (tests/CMakeLists.txt).

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "transport/messages.h"
#include "transport/server.h"

namespace quartet::transport {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kLongTimeout = std::chrono::seconds(60);

// Resident set size of this process, from /proc/self/status.
int64_t rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

// Each handler receives one frame, counts it, then holds its connection open until
// the client closes, so all of them are open at once.
class CountingServer {
 public:
  CountingServer() : token_(make_token()) {
    ServerOptions options;
    options.token = token_;
    options.hello_timeout = kLongTimeout;
    server_ = std::make_unique<Server>(options, [this](Connection& connection, const Hello&) {
      const Frame frame = connection.receive(kLongTimeout);
      if (frame.type == MessageType::control && frame.payload.size() == 64) {
        std::lock_guard lock(mutex_);
        ++received_;
        changed_.notify_all();
      }
      try {
        connection.receive(kLongTimeout);
      } catch (const ConnectionClosed&) {
      }
    });
  }

  std::unique_ptr<Connection> connect_and_send() {
    auto connection = Connection::connect("127.0.0.1", server_->port(), kLongTimeout);
    send_message(*connection, MessageType::hello, Hello{token_, "client", kProtocolVersion}, kLongTimeout);
    const std::vector<std::byte> payload(64, std::byte{1});
    connection->send(MessageType::control, payload, kLongTimeout);
    return connection;
  }

  // Waits until `n` frames were counted; returns how many there are.
  int wait_received(int n) {
    std::unique_lock lock(mutex_);
    changed_.wait_until(lock, Clock::now() + kLongTimeout, [&] { return received_ >= n; });
    return received_;
  }

  Server& server() { return *server_; }

 private:
  std::string token_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int received_ = 0;
  std::unique_ptr<Server> server_;
};

TEST(ServerLoad, TwoHundredConcurrentConnectionsAreAllReceived) {
  CountingServer counting;
  std::vector<std::unique_ptr<Connection>> clients;
  for (int i = 0; i < 200; ++i) clients.push_back(counting.connect_and_send());
  EXPECT_EQ(counting.wait_received(200), 200);
  EXPECT_EQ(counting.server().stats().active, 200);
  EXPECT_EQ(counting.server().stats().accepted, 200);
  EXPECT_EQ(counting.server().stats().refused, 0);
  clients.clear();
  counting.server().stop();
}

TEST(ServerLoad, MemoryGrowsByLessThan50MBFrom10To200Connections) {
  CountingServer counting;
  std::vector<std::unique_ptr<Connection>> clients;
  for (int i = 0; i < 10; ++i) clients.push_back(counting.connect_and_send());
  ASSERT_EQ(counting.wait_received(10), 10);
  const int64_t rss_10 = rss_bytes();
  for (int i = 10; i < 200; ++i) clients.push_back(counting.connect_and_send());
  ASSERT_EQ(counting.wait_received(200), 200);
  const int64_t rss_200 = rss_bytes();
  const double growth_mb = static_cast<double>(rss_200 - rss_10) / 1e6;
  std::printf("[ measured ] RSS with 10 connections %.1f MB, with 200 %.1f MB: +%.2f MB (client and server ends)\n",
              rss_10 / 1e6, rss_200 / 1e6, growth_mb);
  EXPECT_LT(growth_mb, 50.0);
}

}  // namespace
}  // namespace quartet::transport

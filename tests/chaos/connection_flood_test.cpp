// Connection floods on 127.0.0.1: more sockets than a coordinator has connection slots
// (1,100 over its 1,024), that never say hello or say it with a wrong token, against a
// server and a coordinator with their default caps. Roles with the token must still get
// in and meet; refused roles must be told why; the log must stay a few lines.

#include <sys/resource.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/transport/net_helpers.h"
#include "transport/coordinator.h"
#include "transport/messages.h"
#include "transport/server.h"

namespace quartet::transport {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::IdleSocket;
using testing::kLongTimeout;
using testing::wait_until;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const ServerOptions kDefaults;
// The flood: more sockets from 127.0.0.1 than its per-address cap, and from ten more
// loopback addresses, each under that cap, together more than the unauthenticated share
// and than the connection slots.
constexpr int kOtherAddresses = 10;
constexpr int kFromEachOther = 20;
constexpr int kFromOneAddress = 900;
constexpr int kFlood = kFromOneAddress + kOtherAddresses * kFromEachOther;
static_assert(kFlood > 1024, "the flood outnumbers the default connection slots");

// Log lines a flood of `elapsed` may cost: one in full, one summary per interval, and
// the summary of what was left at stop().
size_t lines_allowed(Clock::duration elapsed) {
  return 2 + static_cast<size_t>(elapsed / kDefaults.refusal_log_interval);
}

// The flood's sockets. Both ends are this process: the descriptor limit is raised to
// the hard limit while the flood lasts, and put back after.
class Flood {
 public:
  Flood() {
    if (::getrlimit(RLIMIT_NOFILE, &before_) != 0) return;
    rlimit raised = before_;
    raised.rlim_cur = raised.rlim_max;
    limit_ = ::setrlimit(RLIMIT_NOFILE, &raised) == 0 ? raised.rlim_cur : before_.rlim_cur;
  }
  ~Flood() {
    sockets_.clear();
    ::setrlimit(RLIMIT_NOFILE, &before_);
  }
  Flood(const Flood&) = delete;
  Flood& operator=(const Flood&) = delete;

  // Why this process cannot hold the flood and the server's ends of it, with room to
  // spare; empty when it can.
  std::string why_not() const {
    if (limit_ == RLIM_INFINITY || limit_ >= static_cast<rlim_t>(kFlood) + 512) return "";
    return "the descriptor limit (" + std::to_string(limit_) + ") cannot hold " + std::to_string(kFlood) +
           " sockets and the server's ends";
  }

  // Opens the flood against 127.0.0.1:port; `also` runs on each socket (a wrong hello, say).
  void open(uint16_t port, const std::function<void(IdleSocket&)>& also = {}) {
    auto add = [&](const std::string& from) {
      sockets_.push_back(std::make_unique<IdleSocket>(io_, from, port));
      if (also) also(*sockets_.back());
    };
    for (int i = 0; i < kFromOneAddress; ++i) add("127.0.0.1");
    for (int a = 0; a < kOtherAddresses; ++a)
      for (int i = 0; i < kFromEachOther; ++i) add("127.0.0." + std::to_string(2 + a));
  }
  std::vector<std::unique_ptr<IdleSocket>>& sockets() { return sockets_; }
  int still_open(int first, int count) {
    int n = 0;
    for (int i = first; i < first + count; ++i) n += sockets_[static_cast<size_t>(i)]->refused() ? 0 : 1;
    return n;
  }
  void close() { sockets_.clear(); }

 private:
  rlimit before_{};
  rlim_t limit_ = 0;
  asio::io_context io_;
  std::vector<std::unique_ptr<IdleSocket>> sockets_;
};

// Log lines, kept for counting.
struct Lines {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard lock(mutex);
      lines.push_back(line);
    };
  }
  std::vector<std::string> get() {
    std::lock_guard lock(mutex);
    return lines;
  }
};

// The refusals a summary counts: the sum of its reasons' "(N)", N as grouped() writes it.
int64_t refusals_in(const std::string& summary) {
  int64_t total = 0;
  for (size_t at = summary.find(" s: "); (at = summary.find('(', at)) != std::string::npos; ++at) {
    std::string digits;
    for (size_t i = at + 1; i < summary.size() && summary[i] != ')'; ++i)
      if (summary[i] != ',') digits += summary[i];
    total += std::stoll(digits);
  }
  return total;
}

// What this process writes to stderr from construction to take(), or to destruction
// when a test ends early.
class StderrCapture {
 public:
  StderrCapture() { ::testing::internal::CaptureStderr(); }
  ~StderrCapture() {
    if (!taken_) ::testing::internal::GetCapturedStderr();
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  std::string take() {
    taken_ = true;
    return ::testing::internal::GetCapturedStderr();
  }

 private:
  bool taken_ = false;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    start = end == std::string::npos ? text.size() : end + 1;
  }
  return lines;
}

int threads_of_this_process() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

void print_lines(const std::string& when, const std::vector<std::string>& lines) {
  std::printf("[ measured ] %zu log line(s) %s\n", lines.size(), when.c_str());
  for (const auto& line : lines) std::printf("             %s\n", line.c_str());
}

double ms_since(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

TEST(ConnectionFlood, IdleSocketsHoldOnlyTheirShareAndNoThreads) {
  Flood flood;
  if (!flood.why_not().empty()) GTEST_SKIP() << flood.why_not();
  Lines log;
  const std::string token = make_token();
  ServerOptions options;
  options.token = token;
  options.log = log.sink();
  Server server(options, [](Connection& connection, const Hello&) {
    const Frame frame = connection.receive(kLongTimeout);
    connection.send(frame.type, frame.payload, kLongTimeout);
  });
  const int threads_before = threads_of_this_process();
  const auto start = Clock::now();
  flood.open(server.port());
  ASSERT_TRUE(wait_until(
      [&] {
        const auto s = server.stats();
        return s.refused + s.unauthenticated == kFlood;
      },
      60s))
      << server.stats().refused << " refused and " << server.stats().unauthenticated << " waiting of " << kFlood;
  const double flooded_ms = ms_since(start);
  const auto stats = server.stats();
  const auto share = static_cast<int64_t>(kDefaults.max_unauthenticated);
  EXPECT_EQ(stats.unauthenticated, share);
  EXPECT_EQ(stats.refused, kFlood - share);
  EXPECT_EQ(stats.accepted, 0);
  EXPECT_LE(threads_of_this_process(), threads_before + 1) << "no thread per connection";
  // The server closed the rest; of those left, 127.0.0.1 holds no more than its cap.
  ASSERT_TRUE(wait_until([&] { return flood.still_open(0, kFlood) == share; }, 60s));
  EXPECT_LE(flood.still_open(0, kFromOneAddress), static_cast<int>(kDefaults.max_unauthenticated_per_address));
  EXPECT_THAT(flood.sockets().front()->refusal_text(kLongTimeout).value_or("(none)"),
              StartsWith("busy: too many connections waiting for their hello"));

  // A role with the token is served while the flood holds the share.
  auto role = Connection::connect("127.0.0.1", server.port(), kLongTimeout);
  send_message(*role, MessageType::hello, Hello{token, "rank0", kProtocolVersion}, kLongTimeout);
  role->send(MessageType::control, testing::bytes_of("ping"), kLongTimeout);
  EXPECT_EQ(role->receive(kLongTimeout).payload, testing::bytes_of("ping"));
  EXPECT_EQ(server.stats().accepted, 1);

  const auto during = log.get();
  print_lines("while " + std::to_string(kFlood) + " sockets flooded the server", during);
  EXPECT_LE(during.size(), lines_allowed(Clock::now() - start));
  flood.close();
  ASSERT_TRUE(wait_until([&] { return server.stats().unauthenticated == 0; }, 60s));
  server.stop();
  const auto after = log.get();
  print_lines("in all, once the server stopped", after);
  std::printf("[ measured ] %d sockets refused or held in %.0f ms\n", kFlood, flooded_ms);
  EXPECT_LE(after.size(), lines_allowed(Clock::now() - start));
  ASSERT_GE(after.size(), 2u);
  EXPECT_THAT(after.back(), HasSubstr(" connections from 127.0.0.1 ("));
  EXPECT_THAT(after.back(), HasSubstr("over the per-address cap ("));
  EXPECT_THAT(after.back(), HasSubstr("closed before the hello ("));
}

TEST(ConnectionFlood, WrongTokensAreRefusedAtOnceAndSummarised) {
  Flood flood;
  if (!flood.why_not().empty()) GTEST_SKIP() << flood.why_not();
  Lines log;
  ServerOptions options;
  options.token = make_token();
  options.log = log.sink();
  Server server(options, [](Connection&, const Hello&) {});
  const auto start = Clock::now();
  const auto hello = encode_message(Hello{make_token(), "intruder", kProtocolVersion});
  const auto wrong = testing::frame_bytes(MessageType::hello, hello);
  flood.open(server.port(), [&](IdleSocket& s) { s.write(wrong); });
  ASSERT_TRUE(wait_until([&] { return server.stats().refused == kFlood; }, 60s)) << server.stats().refused;
  EXPECT_EQ(flood.sockets().back()->refusal_text(kLongTimeout), "wrong token");
  flood.close();
  server.stop();
  const auto lines = log.get();
  print_lines("for " + std::to_string(kFlood) + " wrong tokens", lines);
  EXPECT_LE(lines.size(), lines_allowed(Clock::now() - start));
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines.front(), HasSubstr("wrong token (role \"intruder\")"));
  // Every refusal is in a line: the first in full, the rest in summaries.
  int64_t summarised = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_THAT(lines[i], HasSubstr("wrong token ("));
    summarised += refusals_in(lines[i]);
  }
  EXPECT_EQ(summarised, kFlood - 1);
}

// 1,100 idle connections to a coordinator with its defaults, more than its 1,024
// connection slots, then an arm of two ranks. Its log goes where it goes in a run: stderr.
TEST(ConnectionFlood, RolesStillMeetAtAFloodedCoordinatorAndItsStderrStaysShort) {
  Flood flood;
  if (!flood.why_not().empty()) GTEST_SKIP() << flood.why_not();
  StderrCapture captured;
  const auto start = Clock::now();
  double met_ms = 0;
  {
    Coordinator coordinator({});
    coordinator.declare_arm("ddp", 2);
    flood.open(coordinator.port());

    auto options = [&](const std::string& role) {
      ClientOptions co;
      co.port = coordinator.port();
      co.token = coordinator.token();
      co.arm = "ddp";
      co.role = role;
      return co;
    };
    const auto joining = Clock::now();
    CoordinatorClient rank0(options("rank0"));
    CoordinatorClient rank1(options("rank1"));
    rank0.kv_set("ddp/rendezvous", "127.0.0.1:29500");
    EXPECT_EQ(rank1.kv_wait("ddp/rendezvous", 30s), "127.0.0.1:29500");
    met_ms = ms_since(joining);
    EXPECT_EQ(rank0.rank(), 0);
    EXPECT_EQ(rank1.rank(), 1);
    EXPECT_TRUE(coordinator.wait_for_roles("ddp", 2, 30s));

    // A role with the wrong token is told so, in the coordinator's words, not a broken pipe.
    ClientOptions wrong = options("rank2");
    wrong.token = make_token();
    try {
      CoordinatorClient intruder(wrong);
      ADD_FAILURE() << "a wrong token was let in";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()),
                "the coordinator at " + coordinator.address() + " refused role rank2: wrong token");
    }
    rank0.leave();
    rank1.leave();
    flood.close();
    coordinator.stop();
  }
  const std::string stderr_text = captured.take();
  const auto lines = lines_of(stderr_text);
  std::printf("[ measured ] two roles joined and met in %.1f ms with %d sockets flooding the coordinator\n", met_ms,
              kFlood);
  print_lines("on stderr (" + std::to_string(stderr_text.size()) + " bytes)", lines);
  EXPECT_LE(lines.size(), lines_allowed(Clock::now() - start));
  EXPECT_LT(stderr_text.size(), 4096u);
}

}  // namespace
}  // namespace quartet::transport

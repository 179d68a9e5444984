#include "transport/server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <ostream>
#include <random>
#include <thread>

#include "tests/transport/net_helpers.h"
#include "transport/messages.h"

namespace quartet::transport {
namespace {

using ::testing::HasSubstr;
using testing::bytes_of;
using testing::frame_bytes;
using testing::IdleSocket;
using testing::kLongTimeout;
using testing::patch;
using testing::RawClient;
using testing::wait_until;
using Clock = std::chrono::steady_clock;

// A server whose handler echoes every frame back until the client closes, and which
// keeps its log lines.
class EchoServer {
 public:
  explicit EchoServer(Deadline hello_timeout = kLongTimeout, const std::function<void(ServerOptions&)>& adjust = {})
      : token_(make_token()) {
    ServerOptions options;
    options.token = token_;
    options.hello_timeout = hello_timeout;
    if (adjust) adjust(options);
    options.log = [this](const std::string& line) {
      std::lock_guard lock(mutex_);
      log_.push_back(line);
      changed_.notify_all();
    };
    server_ = std::make_unique<Server>(std::move(options), [](Connection& connection, const Hello&) {
      for (;;) {
        Frame frame;
        try {
          frame = connection.receive(kLongTimeout);
        } catch (const ConnectionClosed&) {
          return;
        }
        connection.send(frame.type, frame.payload, kLongTimeout);
      }
    });
  }

  Server& server() { return *server_; }
  uint16_t port() const { return server_->port(); }
  const std::string& token() const { return token_; }

  std::vector<std::string> log_lines() {
    std::lock_guard lock(mutex_);
    return log_;
  }
  // Waits (generously) for `n` log lines and returns them.
  std::vector<std::string> wait_for_log_lines(size_t n) {
    std::unique_lock lock(mutex_);
    changed_.wait_until(lock, Clock::now() + kLongTimeout, [&] { return log_.size() >= n; });
    return log_;
  }

  std::unique_ptr<Connection> connect_and_hello(const std::string& token) {
    auto connection = Connection::connect("127.0.0.1", port(), kLongTimeout);
    send_message(*connection, MessageType::hello, Hello{token, "test", kProtocolVersion}, kLongTimeout);
    return connection;
  }

 private:
  std::string token_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> log_;
  std::unique_ptr<Server> server_;
};

void expect_echo(Connection& connection) {
  const auto payload = bytes_of("ping");
  connection.send(MessageType::control, payload, kLongTimeout);
  const Frame back = connection.receive(kLongTimeout);
  EXPECT_EQ(back.type, MessageType::control);
  EXPECT_EQ(back.payload, payload);
}

TEST(Server, ListensOnAnOsChosenPortOfLoopback) {
  EchoServer echo;
  EXPECT_NE(echo.port(), 0);
  EXPECT_EQ(echo.server().address(), "127.0.0.1");
}

TEST(Server, HelloWithTheTokenReachesTheHandler) {
  EchoServer echo;
  auto client = echo.connect_and_hello(echo.token());
  expect_echo(*client);
  EXPECT_EQ(echo.server().stats().accepted, 1);
  EXPECT_EQ(echo.server().stats().refused, 0);
}

TEST(Server, HandlerSeesTheHellosRole) {
  const std::string token = make_token();
  std::mutex mutex;
  std::string role;
  ServerOptions options;
  options.token = token;
  Server server(options, [&](Connection& connection, const Hello& hello) {
    {
      std::lock_guard lock(mutex);
      role = hello.role;
    }
    send_message(connection, MessageType::welcome, Welcome{0, 1, "{}"}, kLongTimeout);
  });
  auto client = Connection::connect("127.0.0.1", server.port(), kLongTimeout);
  send_message(*client, MessageType::hello, Hello{token, "rank", kProtocolVersion}, kLongTimeout);
  EXPECT_EQ(receive_message<Welcome>(*client, MessageType::welcome, kLongTimeout).world_size, 1);
  std::lock_guard lock(mutex);
  EXPECT_EQ(role, "rank");
}

TEST(Server, WrongTokenGetsAnErrorMessageAndIsClosed) {
  EchoServer echo;
  auto client = echo.connect_and_hello(make_token());
  try {
    receive_message<Welcome>(*client, MessageType::welcome, kLongTimeout);
    FAIL() << "a wrong token was not refused";
  } catch (const RemoteError& e) {
    EXPECT_THAT(e.what(), HasSubstr("wrong token"));
  }
  EXPECT_THROW(client->receive(kLongTimeout), ConnectionClosed);
}

// What a misbehaving peer does with its socket.
struct BadOpening {
  std::string name;
  std::function<std::vector<std::byte>(const std::string& token)> bytes;
  bool close_after = false;  // false: stay silent with the socket open
  std::string logged;        // what the log line must say
};

// gtest prints the parameter into the test's name: the opening's name, not its bytes.
void PrintTo(const BadOpening& b, std::ostream* out) { *out << b.name; }

std::vector<std::byte> hello_frame(const Hello& hello) {
  const auto payload = encode_message(hello);
  return frame_bytes(MessageType::hello, payload);
}

std::vector<BadOpening> bad_openings() {
  return {
      {"WrongToken", [](const std::string&) { return hello_frame({make_token(), "x", kProtocolVersion}); }, false,
       "wrong token"},
      {"EmptyToken", [](const std::string&) { return hello_frame({"", "x", kProtocolVersion}); }, false,
       "wrong token"},
      {"OtherProtocolVersionInTheHello",
       [](const std::string& token) { return hello_frame({token, "x", 99}); }, false, "protocol version 99"},
      {"BadMagic",
       [](const std::string& token) {
         auto f = hello_frame({token, "x", kProtocolVersion});
         patch<uint32_t>(f, 0, 0x20544547);
         return f;
       },
       false, "bad frame magic"},
      {"OtherFrameVersion",
       [](const std::string& token) {
         auto f = hello_frame({token, "x", kProtocolVersion});
         patch<uint16_t>(f, 4, 2);
         return f;
       },
       false, "unsupported protocol version 2"},
      {"UnknownType",
       [](const std::string& token) {
         auto f = hello_frame({token, "x", kProtocolVersion});
         patch<uint16_t>(f, 6, 0x7777);
         return f;
       },
       false, "unknown message type"},
      {"LengthOfFourGibibytes",
       [](const std::string&) {
         auto f = frame_bytes(MessageType::hello, {});
         patch<uint32_t>(f, 8, 0xFFFFFFFFu);
         return f;
       },
       false, "over the limit"},
      {"HelloOverTheHelloLimit",
       [](const std::string& token) { return hello_frame({token, std::string(100000, 'r'), kProtocolVersion}); },
       false, "over the limit of 65536"},
      {"TruncatedPayload",
       [](const std::string& token) {
         auto f = hello_frame({token, "x", kProtocolVersion});
         f.resize(f.size() - 5);
         return f;
       },
       true, "truncated hello frame"},
      {"CrcMismatch",
       [](const std::string& token) {
         auto f = hello_frame({token, "x", kProtocolVersion});
         f[kFrameHeaderBytes + 20] ^= std::byte{0x10};
         return f;
       },
       false, "CRC mismatch"},
      {"RandomBytes",
       [](const std::string&) {
         std::vector<std::byte> junk(4096);
         std::mt19937 rng(11);
         for (auto& b : junk) b = static_cast<std::byte>(rng());
         return junk;
       },
       false, "bad frame magic"},
      {"FirstFrameIsNotAHello",
       [](const std::string&) {
         const auto payload = encode_message(KeyValue{"k", {}});
         return frame_bytes(MessageType::kv_get, payload);
       },
       false, "not a hello"},
      {"MalformedHelloPayload",
       [](const std::string&) { return frame_bytes(MessageType::hello, bytes_of("garbage that is no hello")); },
       false, "size field"},
      {"SlowSenderStopsMidHeader",
       [](const std::string& token) {
         auto f = hello_frame({token, "x", kProtocolVersion});
         f.resize(9);
         return f;
       },
       false, "timed out"},
      {"SilentPeer", [](const std::string&) { return std::vector<std::byte>{}; }, false, "timed out"},
  };
}

class ServerRefuses : public ::testing::TestWithParam<BadOpening> {};

TEST_P(ServerRefuses, ClosesTheBadConnectionWithOneLogLineAndServesTheNext) {
  const BadOpening& bad = GetParam();
  EchoServer echo(std::chrono::milliseconds(1500));

  RawClient raw(echo.port());
  raw.write(bad.bytes(echo.token()));
  if (bad.close_after) raw.socket.shutdown(asio::ip::tcp::socket::shutdown_send);

  // A well-behaved client is served while the bad one is being dealt with.
  auto good = echo.connect_and_hello(echo.token());
  expect_echo(*good);

  const auto log = echo.wait_for_log_lines(1);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0], HasSubstr("refused 127.0.0.1:"));
  EXPECT_THAT(log[0], HasSubstr(bad.logged));
  EXPECT_TRUE(raw.wait_until_closed_by_peer());
  EXPECT_EQ(echo.server().stats().refused, 1);
  EXPECT_EQ(echo.server().stats().accepted, 1);

  expect_echo(*good);  // still served after the refusal
}

INSTANTIATE_TEST_SUITE_P(BadOpenings, ServerRefuses, ::testing::ValuesIn(bad_openings()),
                         [](const auto& info) { return info.param.name; });

// Connections yet to say hello, with caps small enough for a few sockets to reach.
EchoServer capped_server(size_t share, size_t per_address) {
  return EchoServer(kLongTimeout, [&](ServerOptions& o) {
    o.max_unauthenticated = share;
    o.max_unauthenticated_per_address = per_address;
  });
}

bool unauthenticated_reach(EchoServer& echo, int64_t n) {
  return wait_until([&] { return echo.server().stats().unauthenticated == n; }, std::chrono::seconds(30));
}

TEST(Server, AnAddressAtItsCapMakesRoomByClosingItsOldestIdleConnection) {
  EchoServer echo = capped_server(8, 2);
  asio::io_context io;
  IdleSocket oldest(io, "127.0.0.1", echo.port());
  ASSERT_TRUE(unauthenticated_reach(echo, 1));
  IdleSocket second(io, "127.0.0.1", echo.port());
  ASSERT_TRUE(unauthenticated_reach(echo, 2));
  IdleSocket third(io, "127.0.0.1", echo.port());
  ASSERT_TRUE(wait_until([&] { return echo.server().stats().refused == 1; }, std::chrono::seconds(30)));
  EXPECT_EQ(echo.server().stats().unauthenticated, 2);
  EXPECT_EQ(oldest.refusal_text(kLongTimeout),
            "busy: too many connections waiting for their hello (at most 2 from 127.0.0.1); this one waited longest");
  EXPECT_FALSE(second.refused());
  EXPECT_FALSE(third.refused());
  // A role at the same address gets in: its hello comes at once.
  auto good = echo.connect_and_hello(echo.token());
  expect_echo(*good);
  EXPECT_TRUE(wait_until([&] { return second.refused(); }, std::chrono::seconds(30)));
  EXPECT_FALSE(third.refused());
  const auto log = echo.log_lines();
  ASSERT_EQ(log.size(), 1u) << "the second refusal waits for the summary";
  EXPECT_THAT(log[0], HasSubstr("busy: too many connections waiting for their hello"));
}

TEST(Server, AFullShareMakesRoomAtTheAddressHoldingTheMost) {
  EchoServer echo = capped_server(4, 3);
  asio::io_context io;
  std::vector<std::unique_ptr<IdleSocket>> busiest;
  for (int i = 0; i < 3; ++i) {
    busiest.push_back(std::make_unique<IdleSocket>(io, "127.0.0.2", echo.port()));
    ASSERT_TRUE(unauthenticated_reach(echo, i + 1));
  }
  IdleSocket other(io, "127.0.0.3", echo.port());
  ASSERT_TRUE(unauthenticated_reach(echo, 4));
  IdleSocket newcomer(io, "127.0.0.4", echo.port());
  ASSERT_TRUE(wait_until([&] { return echo.server().stats().refused == 1; }, std::chrono::seconds(30)));
  EXPECT_EQ(busiest[0]->refusal_text(kLongTimeout),
            "busy: too many connections waiting for their hello (at most 4 in all); this one waited longest");
  EXPECT_FALSE(busiest[1]->refused());
  EXPECT_FALSE(other.refused());
  EXPECT_FALSE(newcomer.refused());
  EXPECT_EQ(echo.server().stats().unauthenticated, 4);
}

TEST(Server, AHelloPastMaxConnectionsIsToldTooManyConnections) {
  EchoServer echo(kLongTimeout, [](ServerOptions& o) { o.max_connections = 1; });
  auto first = echo.connect_and_hello(echo.token());
  expect_echo(*first);
  auto second = echo.connect_and_hello(echo.token());
  try {
    receive_message<Welcome>(*second, MessageType::welcome, kLongTimeout);
    FAIL() << "a second connection got past max_connections = 1";
  } catch (const RemoteError& e) {
    EXPECT_EQ(e.text(), "too many connections (1 in use)");
  }
  expect_echo(*first);
  first.reset();  // its slot frees once its handler has returned
  ASSERT_TRUE(wait_until([&] { return echo.server().stats().active == 0; }, std::chrono::seconds(30)));
  auto third = echo.connect_and_hello(echo.token());
  expect_echo(*third);
}

TEST(Server, ConnectionsWaitingForTheirHelloAreToldTheServerIsShuttingDown) {
  EchoServer echo;
  asio::io_context io;
  IdleSocket waiting(io, "127.0.0.1", echo.port());
  ASSERT_TRUE(unauthenticated_reach(echo, 1));
  echo.server().stop();
  EXPECT_EQ(waiting.refusal_text(kLongTimeout), "the server is shutting down");
  EXPECT_EQ(echo.server().stats().unauthenticated, 0);
}

TEST(Server, CapsOfZeroAreRefused) {
  ServerOptions options;
  options.token = make_token();
  options.max_unauthenticated_per_address = 0;
  EXPECT_THROW(Server(options, [](Connection&, const Hello&) {}), std::invalid_argument);
}

TEST(Server, HandlerExceptionIsLoggedAndOthersAreServed) {
  const std::string token = make_token();
  std::vector<std::string> log;
  std::mutex mutex;
  ServerOptions options;
  options.token = token;
  options.log = [&](const std::string& line) {
    std::lock_guard lock(mutex);
    log.push_back(line);
  };
  Server server(options, [](Connection& connection, const Hello& hello) {
    if (hello.role == "doomed") throw std::runtime_error("handler gave up");
    const Frame frame = connection.receive(kLongTimeout);
    connection.send(frame.type, frame.payload, kLongTimeout);
  });
  auto doomed = Connection::connect("127.0.0.1", server.port(), kLongTimeout);
  send_message(*doomed, MessageType::hello, Hello{token, "doomed", kProtocolVersion}, kLongTimeout);
  EXPECT_THROW(doomed->receive(kLongTimeout), ConnectionClosed);

  auto good = Connection::connect("127.0.0.1", server.port(), kLongTimeout);
  send_message(*good, MessageType::hello, Hello{token, "fine", kProtocolVersion}, kLongTimeout);
  expect_echo(*good);
  std::lock_guard lock(mutex);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0], HasSubstr("handler gave up"));
}

TEST(Server, StopClosesOpenConnectionsAndJoinsTheirHandlers) {
  EchoServer echo;
  auto a = echo.connect_and_hello(echo.token());
  auto b = echo.connect_and_hello(echo.token());
  expect_echo(*a);
  expect_echo(*b);
  echo.server().stop();  // handlers are blocked in receive(); stop must not hang
  EXPECT_EQ(echo.server().stats().active, 0);
  EXPECT_THROW(a->receive(kLongTimeout), ConnectionClosed);
  EXPECT_THROW(Connection::connect("127.0.0.1", echo.port(), kLongTimeout), std::runtime_error);
}

TEST(Server, StopIsIdempotent) {
  EchoServer echo;
  echo.server().stop();
  echo.server().stop();
  EXPECT_EQ(echo.server().stats().active, 0);
}

TEST(Server, EmptyTokenIsRefused) {
  EXPECT_THROW(Server(ServerOptions{}, [](Connection&, const Hello&) {}), std::invalid_argument);
}

TEST(Server, AddressThatIsNotAnIpIsRefused) {
  ServerOptions options;
  options.token = make_token();
  options.address = "not an address";
  EXPECT_THROW(Server(options, [](Connection&, const Hello&) {}), std::invalid_argument);
}

TEST(Server, PortInUseIsReportedWithTheAddress) {
  EchoServer first;
  ServerOptions options;
  options.token = make_token();
  options.port = first.port();
  try {
    Server second(options, [](Connection&, const Hello&) {});
    FAIL() << "two servers on one port";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("127.0.0.1:" + std::to_string(first.port())));
  }
}

}  // namespace
}  // namespace quartet::transport

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
using testing::kLongTimeout;
using testing::patch;
using testing::RawClient;
using Clock = std::chrono::steady_clock;

// A server whose handler echoes every frame back until the client closes, and which
// keeps its log lines.
class EchoServer {
 public:
  explicit EchoServer(Deadline hello_timeout = kLongTimeout) : token_(make_token()) {
    ServerOptions options;
    options.token = token_;
    options.hello_timeout = hello_timeout;
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

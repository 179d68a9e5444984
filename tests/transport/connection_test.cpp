#include "transport/connection.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "tests/transport/alloc_probe.h"
#include "tests/transport/net_helpers.h"
#include "transport/messages.h"

namespace quartet::transport {
namespace {

using ::testing::HasSubstr;
using testing::bytes_of;
using testing::connected_pair;
using testing::frame_bytes;
using testing::kLongTimeout;
using testing::patch;

// A Connection on one end and a raw socket on the other, for writing bad bytes.
struct RawPair {
  asio::io_context io;
  asio::ip::tcp::socket raw{io};
  std::unique_ptr<Connection> connection;

  RawPair() {
    asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    raw.connect(acceptor.local_endpoint());
    connection = std::make_unique<Connection>(acceptor.accept());
  }
  void write(std::span<const std::byte> bytes) { asio::write(raw, asio::buffer(bytes.data(), bytes.size())); }
};

template <class E>
std::string error_of(Connection& connection, Deadline timeout = kLongTimeout) {
  try {
    connection.receive(timeout);
  } catch (const E& e) {
    return e.what();
  }
  return "(no error of the expected kind)";
}

TEST(Connection, FrameRoundTripsTypeAndPayload) {
  auto pair = connected_pair();
  const auto payload = bytes_of("a payload");
  pair.client->send(MessageType::control, payload, kLongTimeout);
  const Frame frame = pair.server->receive(kLongTimeout);
  EXPECT_EQ(frame.type, MessageType::control);
  EXPECT_EQ(frame.payload, payload);
}

TEST(Connection, EmptyPayloadRoundTrips) {
  auto pair = connected_pair();
  pair.client->send(MessageType::heartbeat, std::span<const std::byte>{}, kLongTimeout);
  const Frame frame = pair.server->receive(kLongTimeout);
  EXPECT_EQ(frame.type, MessageType::heartbeat);
  EXPECT_TRUE(frame.payload.empty());
}

TEST(Connection, LargeFrameRoundTripsBothWays) {
  auto pair = connected_pair();
  std::vector<std::byte> payload(16 << 20);
  std::mt19937 rng(3);
  for (auto& b : payload) b = static_cast<std::byte>(rng());
  std::thread echo([&] {
    Frame frame = pair.server->receive(kLongTimeout);
    pair.server->send(frame.type, frame.payload, kLongTimeout);
  });
  pair.client->send(MessageType::tensors, payload, kLongTimeout);
  const Frame back = pair.client->receive(kLongTimeout);
  echo.join();
  EXPECT_EQ(back.payload, payload);
}

TEST(Connection, GatherSendDeliversThePiecesAsOnePayload) {
  auto pair = connected_pair();
  const auto a = bytes_of("header|");
  const std::vector<std::byte> b(100000, std::byte{7});
  const auto c = bytes_of("|tail");
  const std::span<const std::byte> pieces[] = {a, {}, b, c};
  pair.client->send(MessageType::tensors, pieces, kLongTimeout);
  const Frame frame = pair.server->receive(kLongTimeout);
  std::vector<std::byte> expected;
  for (const auto& piece : pieces) testing::append(expected, piece);
  EXPECT_EQ(frame.payload, expected);
}

TEST(Connection, GatherSendOfManyPiecesDeliversThemInOrder) {
  auto pair = connected_pair();
  std::vector<std::vector<std::byte>> storage;
  std::vector<std::span<const std::byte>> pieces;
  std::vector<std::byte> expected;
  for (int i = 0; i < 300; ++i) {  // more than one sendmsg takes
    storage.emplace_back(static_cast<size_t>(1 + i % 17), static_cast<std::byte>(i));
    testing::append(expected, storage.back());
  }
  for (const auto& s : storage) pieces.emplace_back(s);
  pair.client->send(MessageType::tensors, pieces, kLongTimeout);
  EXPECT_EQ(pair.server->receive(kLongTimeout).payload, expected);
}

TEST(Connection, CountersEqualTheBytesOnTheWireHeadersIncluded) {
  auto pair = connected_pair();
  const std::vector<std::byte> first(1000, std::byte{1});
  const std::vector<std::byte> second(12345, std::byte{2});
  pair.client->send(MessageType::tensors, first, kLongTimeout);
  pair.client->send(MessageType::tensors, second, kLongTimeout);
  pair.server->receive(kLongTimeout);
  pair.server->receive(kLongTimeout);
  pair.server->send(MessageType::heartbeat, std::span<const std::byte>{}, kLongTimeout);
  pair.client->receive(kLongTimeout);

  const int64_t wire = 2 * static_cast<int64_t>(kFrameHeaderBytes) + 1000 + 12345;
  const Counters client = pair.client->counters();
  const Counters server = pair.server->counters();
  EXPECT_EQ(client.bytes_sent, wire);
  EXPECT_EQ(client.messages_sent, 2);
  EXPECT_EQ(server.bytes_received, wire);
  EXPECT_EQ(server.messages_received, 2);
  EXPECT_EQ(server.bytes_sent, static_cast<int64_t>(kFrameHeaderBytes));
  EXPECT_EQ(client.bytes_received, static_cast<int64_t>(kFrameHeaderBytes));
  EXPECT_EQ(client.messages_received, 1);
}

TEST(Connection, CountersIncludeTheHeaderOfARefusedFrame) {
  RawPair pair;
  auto bad = frame_bytes(MessageType::hello, bytes_of("x"));
  patch<uint32_t>(bad, 0, 0xDEADBEEF);
  pair.write(bad);
  EXPECT_THROW(pair.connection->receive(kLongTimeout), FrameError);
  EXPECT_EQ(pair.connection->counters().bytes_received, static_cast<int64_t>(kFrameHeaderBytes));
  EXPECT_EQ(pair.connection->counters().messages_received, 0);
}

TEST(Connection, BadMagicIsRefusedAndClosesTheConnection) {
  RawPair pair;
  auto bad = frame_bytes(MessageType::hello, bytes_of("x"));
  patch<uint32_t>(bad, 0, 0x20544547);  // "GET "
  pair.write(bad);
  EXPECT_THAT(error_of<FrameError>(*pair.connection), HasSubstr("bad frame magic"));
  EXPECT_TRUE(pair.connection->is_closed());
}

TEST(Connection, LengthOfFourGibibytesIsRefusedBeforeAnyLargeAllocation) {
  RawPair pair;
  auto bad = frame_bytes(MessageType::tensors, {});
  patch<uint32_t>(bad, 8, 0xFFFFFFFFu);
  pair.write(bad);  // the header only: a refusal must not wait for the payload
  testing::AllocationProbe probe;
  EXPECT_THAT(error_of<FrameError>(*pair.connection), HasSubstr("over the limit"));
  EXPECT_LT(probe.largest(), 1u << 20);
}

TEST(Connection, LengthOverARaisedLimitIsStillRefused) {
  RawPair pair;
  pair.connection->set_max_frame_bytes(1024);
  auto bad = frame_bytes(MessageType::tensors, {});
  patch<uint32_t>(bad, 8, 1025u);
  pair.write(bad);
  EXPECT_THAT(error_of<FrameError>(*pair.connection), HasSubstr("over the limit of 1024"));
}

TEST(Connection, TruncatedPayloadIsRefusedWhenThePeerCloses) {
  RawPair pair;
  const std::vector<std::byte> payload(100, std::byte{9});
  auto frame = frame_bytes(MessageType::kv_set, payload);
  frame.resize(kFrameHeaderBytes + 10);
  pair.write(frame);
  pair.raw.close();
  EXPECT_THAT(error_of<FrameError>(*pair.connection), HasSubstr("after 10 of 100 payload bytes"));
}

TEST(Connection, TruncatedHeaderIsRefusedWhenThePeerCloses) {
  RawPair pair;
  const auto frame = frame_bytes(MessageType::kv_set, bytes_of("x"));
  pair.write(std::span<const std::byte>(frame).first(5));
  pair.raw.close();
  EXPECT_THAT(error_of<FrameError>(*pair.connection), HasSubstr("truncated frame header"));
}

TEST(Connection, CrcMismatchIsRefused) {
  RawPair pair;
  auto frame = frame_bytes(MessageType::kv_set, bytes_of("some payload"));
  frame.back() ^= std::byte{1};
  pair.write(frame);
  EXPECT_THAT(error_of<FrameError>(*pair.connection), HasSubstr("CRC mismatch"));
}

TEST(Connection, SenderThatStopsMidHeaderTimesOut) {
  RawPair pair;
  const auto frame = frame_bytes(MessageType::hello, bytes_of("x"));
  pair.write(std::span<const std::byte>(frame).first(7));
  EXPECT_THAT(error_of<TimeoutError>(*pair.connection, std::chrono::milliseconds(300)),
              HasSubstr("got 7 of 16 bytes"));
  EXPECT_TRUE(pair.connection->is_closed());
}

TEST(Connection, SenderThatDribblesBytesStillTimesOut) {
  RawPair pair;
  std::atomic<bool> stop{false};
  std::thread dribbler([&] {
    // One byte of a 1000-byte payload every 20 ms: each read succeeds, the frame never ends.
    auto frame = frame_bytes(MessageType::kv_set, std::vector<std::byte>(1000));
    for (size_t i = 0; i < frame.size() && !stop; ++i) {
      asio::error_code ec;
      asio::write(pair.raw, asio::buffer(&frame[i], 1), ec);
      if (ec) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  EXPECT_THROW(pair.connection->receive(std::chrono::milliseconds(500)), TimeoutError);
  stop = true;
  dribbler.join();
}

TEST(Connection, PeerClosingBetweenFramesIsConnectionClosed) {
  auto pair = connected_pair();
  pair.client->close();
  EXPECT_THAT(error_of<ConnectionClosed>(*pair.server), HasSubstr("closed the connection"));
}

TEST(Connection, CloseFromAnotherThreadWakesABlockedReceive) {
  auto pair = connected_pair();
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pair.server->close();
  });
  EXPECT_THROW(pair.server->receive(kLongTimeout), ConnectionClosed);
  closer.join();
}

// A peer that refuses says why and closes, perhaps before our frames reached it: its
// reset then fails our next send, but what it said first can still be read.
TEST(Connection, APartingFrameIsReadAfterAResetFailedASend) {
  RawPair pair;
  pair.connection->send(MessageType::hello, bytes_of("unread"), kLongTimeout);
  ASSERT_TRUE(testing::wait_until([&] { return pair.raw.available() > 0; }, std::chrono::seconds(30)));
  const auto said = encode_message(ErrorMessage{"too many connections (1 in use)"});
  pair.write(frame_bytes(MessageType::error, said));
  pair.raw.close();  // with "unread" unread: the kernel resets the connection
  const bool send_failed = testing::wait_until(
      [&] {
        try {
          pair.connection->send(MessageType::control, bytes_of("more"), kLongTimeout);
          return false;
        } catch (const std::runtime_error&) {
          return true;
        }
      },
      std::chrono::seconds(30));
  ASSERT_TRUE(send_failed);
  EXPECT_TRUE(pair.connection->is_closed());
  EXPECT_THROW(pair.connection->receive(kLongTimeout), ConnectionClosed);
  const auto parting = pair.connection->receive_parting_frame(kLongTimeout);
  ASSERT_TRUE(parting.has_value());
  EXPECT_EQ(parting->type, MessageType::error);
  EXPECT_EQ(parting->payload, said);
  EXPECT_EQ(pair.connection->receive_parting_frame(kLongTimeout), std::nullopt) << "nothing more was said";
}

TEST(Connection, NoPartingFrameWhenThePeerClosedWithoutAWord) {
  auto pair = connected_pair();
  pair.server->close();
  EXPECT_THROW(pair.client->receive(kLongTimeout), ConnectionClosed);
  EXPECT_EQ(pair.client->receive_parting_frame(kLongTimeout), std::nullopt);
}

TEST(Connection, SendAfterCloseIsConnectionClosed) {
  auto pair = connected_pair();
  pair.client->close();
  EXPECT_THROW(pair.client->send(MessageType::heartbeat, std::span<const std::byte>{}, kLongTimeout),
               ConnectionClosed);
}

TEST(Connection, SendToAPeerThatDoesNotReadTimesOut) {
  auto pair = connected_pair();
  const std::vector<std::byte> payload(64 << 20);  // far more than the socket buffers hold
  EXPECT_THROW(pair.client->send(MessageType::tensors, payload, std::chrono::milliseconds(300)), TimeoutError);
  EXPECT_TRUE(pair.client->is_closed());
}

TEST(Connection, SendOverTheFrameLimitIsRefused) {
  auto pair = connected_pair();
  pair.client->set_max_frame_bytes(100);
  const std::vector<std::byte> payload(101);
  EXPECT_THROW(pair.client->send(MessageType::tensors, payload, kLongTimeout), std::invalid_argument);
}

TEST(Connection, ConnectToAPortNobodyListensOnNamesTheAddress) {
  uint16_t port;
  {
    asio::io_context io;
    asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    port = acceptor.local_endpoint().port();
  }
  try {
    Connection::connect("127.0.0.1", port, kLongTimeout);
    FAIL() << "connected to a closed port";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("127.0.0.1:" + std::to_string(port)));
  }
}

TEST(Connection, ConnectResolvesLocalhost) {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  auto client = Connection::connect("localhost", acceptor.local_endpoint().port(), kLongTimeout);
  EXPECT_FALSE(client->is_closed());
}

TEST(Connection, PeerIsAddressAndPort) {
  auto pair = connected_pair();
  EXPECT_THAT(pair.server->peer(), HasSubstr("127.0.0.1:"));
  EXPECT_THAT(pair.client->peer(), HasSubstr("127.0.0.1:"));
}

TEST(Token, Is32LowercaseHexDigits) {
  const std::string token = make_token();
  ASSERT_EQ(token.size(), 32u);
  for (char c : token) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << token;
}

TEST(Token, DiffersEveryTime) {
  std::set<std::string> tokens;
  for (int i = 0; i < 100; ++i) tokens.insert(make_token());
  EXPECT_EQ(tokens.size(), 100u);
}

TEST(Token, EqualityComparesContentAndLength) {
  const std::string token = make_token();
  EXPECT_TRUE(tokens_equal(token, std::string(token)));
  std::string other = token;
  other.back() = other.back() == 'a' ? 'b' : 'a';
  EXPECT_FALSE(tokens_equal(token, other));
  EXPECT_FALSE(tokens_equal(token, token.substr(0, 31)));
  EXPECT_FALSE(tokens_equal(token, token + "0"));
  EXPECT_FALSE(tokens_equal(token, ""));
  EXPECT_TRUE(tokens_equal("", ""));
}

}  // namespace
}  // namespace quartet::transport

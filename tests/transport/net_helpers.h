#pragma once

// Sockets for transport tests: a connected pair of Connections on 127.0.0.1, a raw
// socket that writes whatever bytes a test wants, idle sockets from any loopback
// address, and frames built by hand.

#include <poll.h>

#include <asio.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "transport/connection.h"
#include "transport/frame.h"
#include "transport/messages.h"

namespace quartet::transport::testing {

// Generous: the test machine may be loaded.
inline constexpr auto kLongTimeout = std::chrono::seconds(30);

struct ConnectedPair {
  std::unique_ptr<Connection> client;
  std::unique_ptr<Connection> server;
};

inline ConnectedPair connected_pair() {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  ConnectedPair pair;
  pair.client = Connection::connect("127.0.0.1", acceptor.local_endpoint().port(), kLongTimeout);
  pair.server = std::make_unique<Connection>(acceptor.accept());
  return pair;
}

// A plain blocking socket connected to 127.0.0.1:port, for writing malformed bytes.
struct RawClient {
  asio::io_context io;
  asio::ip::tcp::socket socket{io};

  explicit RawClient(uint16_t port) { socket.connect({asio::ip::make_address("127.0.0.1"), port}); }
  // Ignores errors: the server may have closed on the first bad bytes.
  void write(std::span<const std::byte> bytes) {
    asio::error_code ec;
    asio::write(socket, asio::buffer(bytes.data(), bytes.size()), ec);
  }
  // Blocks until the peer closes; true if it did (end of stream or reset).
  bool wait_until_closed_by_peer() {
    std::byte sink[4096];
    for (;;) {
      asio::error_code ec;
      socket.read_some(asio::buffer(sink), ec);
      if (ec) return true;
    }
  }
};

// A connection that says nothing, from `from`: any address of 127.0.0.0/8, all of which
// are this host's on Linux, so one test can be many peers. Closed when destroyed.
class IdleSocket {
 public:
  IdleSocket(asio::io_context& io, const std::string& from, uint16_t port) : socket_(io) {
    const auto loopback = asio::ip::make_address(from);
    socket_.open(asio::ip::tcp::v4());
    socket_.bind({loopback, 0});
    socket_.connect({asio::ip::make_address("127.0.0.1"), port});
  }
  void write(std::span<const std::byte> bytes) { asio::write(socket_, asio::buffer(bytes.data(), bytes.size())); }
  // True once the server has refused it (sent its error frame or closed); never waits.
  bool refused() {
    pollfd p{socket_.native_handle(), POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) == 1;
  }
  // The server's error frame, if it sent one; ends the socket.
  std::optional<std::string> refusal_text(Deadline timeout) {
    Connection connection(std::move(socket_));
    try {
      const Frame frame = connection.receive(timeout);
      if (frame.type == MessageType::error) return decode_message<ErrorMessage>(frame.payload).text;
    } catch (const std::exception&) {
    }
    return std::nullopt;
  }

 private:
  asio::ip::tcp::socket socket_;
};

// Polls `done` every millisecond until it holds or `timeout` has passed; returns it.
inline bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

inline std::vector<std::byte> bytes_of(std::string_view text) {
  std::vector<std::byte> bytes(text.size());
  if (!text.empty()) std::memcpy(bytes.data(), text.data(), text.size());  // memcpy from null is undefined
  return bytes;
}

inline void append(std::vector<std::byte>& out, std::span<const std::byte> bytes) {
  const size_t old = out.size();
  out.resize(old + bytes.size());
  if (!bytes.empty()) std::memcpy(out.data() + old, bytes.data(), bytes.size());
}

// Header followed by payload, exactly as Connection::send puts them on the wire.
inline std::vector<std::byte> frame_bytes(MessageType type, std::span<const std::byte> payload) {
  std::byte header[kFrameHeaderBytes];
  encode_header(type, payload, header);
  std::vector<std::byte> bytes(kFrameHeaderBytes + payload.size());
  std::memcpy(bytes.data(), header, kFrameHeaderBytes);
  if (!payload.empty()) std::memcpy(bytes.data() + kFrameHeaderBytes, payload.data(), payload.size());
  return bytes;
}

// Overwrites a little-endian field of a frame built by frame_bytes.
template <class T>
void patch(std::vector<std::byte>& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

}  // namespace quartet::transport::testing

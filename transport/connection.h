#pragma once

// One framed TCP connection (standalone Asio) with counters, deadlines and an optional
// emulated link. Blocking calls; one thread sends and one thread receives at a time
// (the two may run at once), and close() may be called from any thread.
//
// The socket is non-blocking underneath; every read and write waits in poll() for at
// most what is left of its deadline, so a peer that stops sending (or reading) costs a
// TimeoutError, never a hang. Sockets share one process-wide io_context that is never
// run, so a connection costs one file descriptor and no thread.
//
// With TLS (transport/tls.h) the same loop drives OpenSSL on the same socket: a call that
// wants the socket readable or writable waits in poll() like a plain one, the handshake
// included, so a peer that stalls mid-handshake costs a TimeoutError too. The counters
// then count what crossed the socket: TLS records, their headers and the handshake.

#include <asio.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "transport/frame.h"
#include "transport/link.h"
#include "transport/tls.h"

namespace quartet::transport {

struct Counters {
  int64_t bytes_sent = 0;      // headers (and TLS records) included: what crossed the socket
  int64_t bytes_received = 0;
  int64_t messages_sent = 0;
  int64_t messages_received = 0;
};

struct Frame {
  MessageType type = MessageType::hello;
  std::vector<std::byte> payload;
};

using Deadline = std::chrono::steady_clock::duration;

// A read or write that missed its deadline; the connection is closed.
class TimeoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The peer closed the connection between frames, or close() was called. (A peer that
// closes in the middle of a frame produced a truncated frame: FrameError.)
class ConnectionClosed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Connection {
 public:
  // Connects to host:port (an IP address or a name) within `timeout`; TCP_NODELAY on.
  // With `tls`, the TLS handshake is done within the same `timeout`, and the server's
  // certificate must chain to tls->files().ca and name `host` (an IP SAN for an address).
  // Throws std::runtime_error naming the address and the reason (refused, timed out),
  // TlsError when the handshake fails (the reason: "certificate verify failed (certificate
  // has expired)"), TimeoutError when it stalls.
  static std::unique_ptr<Connection> connect(const std::string& host, uint16_t port, Deadline timeout,
                                             const Tls* tls = nullptr);
  // Takes an accepted, open socket (servers), with its TLS session when the handshake was
  // done on it; the socket's io_context need not outlive the connection.
  explicit Connection(asio::ip::tcp::socket socket, std::unique_ptr<TlsSession> tls = nullptr);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends one frame whose payload is the concatenation of `pieces` (no copy of them:
  // header and pieces go to the socket as one gather write).
  // requires the payload to be at most max_frame_bytes
  // ensures with a link set, the frame leaves no earlier than its serialisation time
  //   (bytes * 8 / bandwidth, after the previous frame was through) plus the latency;
  //   `timeout` counts from then, for the socket write alone
  // Throws std::invalid_argument (too large), TimeoutError past `timeout`,
  // ConnectionClosed after close(), std::runtime_error when the peer is gone. After a
  // TimeoutError or a failure part way, the connection is closed (the stream is broken).
  void send(MessageType type, std::span<const std::span<const std::byte>> pieces, Deadline timeout);
  void send(MessageType type, std::span<const std::byte> payload, Deadline timeout);
  // Receives one frame within `timeout` (for the whole frame, so a peer that dribbles
  // bytes still times out). The header is checked (magic, version, type, length at most
  // max_frame_bytes) before the payload is allocated; the CRC after it is read.
  // Throws FrameError (malformed or truncated), TimeoutError, ConnectionClosed (the
  // peer closed between frames). After any throw the connection is closed.
  Frame receive(Deadline timeout);
  // After a send failed because the peer had closed or reset the connection: a peer
  // that refuses a connection says why in a frame before it closes, and what arrived
  // before the reset stays readable. Reads that frame (waiting at most `timeout` for the
  // rest of it); nullopt when no whole frame is left to read.
  std::optional<Frame> receive_parting_frame(Deadline timeout);

  // The largest payload this connection sends or accepts (default kDefaultMaxFrameBytes).
  void set_max_frame_bytes(uint32_t n) { max_frame_bytes_ = n; }
  uint32_t max_frame_bytes() const { return max_frame_bytes_; }
  // Shapes what this end sends; a profile with bandwidth 0 and latency 0 (loopback)
  // does not shape.
  void set_link(const LinkProfile& link) { link_ = link; }
  const LinkProfile& link() const { return link_; }
  Counters counters() const;
  std::string peer() const;  // "127.0.0.1:43210"
  // The two ends' addresses without ports ("10.0.0.2"; this end's is the one the host
  // routes to the peer from); empty when the socket had none.
  std::string local_address() const;
  std::string peer_address() const;
  // Shuts the socket down both ways: blocked send()/receive() calls on other threads
  // return (ConnectionClosed) and the peer sees end of stream. Idempotent; the file
  // descriptor itself is released by the destructor.
  void close();
  bool is_closed() const;
  bool is_tls() const { return tls_ != nullptr; }

 private:
  void handshake(std::chrono::steady_clock::time_point deadline, Deadline timeout);
  // One TLS call under tls_mutex_; counts the bytes it moved across the socket.
  TlsSession::Io tls_call(const std::function<TlsSession::Io()>& op);
  // Waits until the socket can do what a TLS call wants; false at the deadline.
  bool tls_wait(TlsSession::Want want, std::chrono::steady_clock::time_point deadline);
  void write_tls(std::span<const std::span<const std::byte>> pieces, std::chrono::steady_clock::time_point deadline,
                 size_t total);
  // After a TLS send failed on a reset: the alert the peer sent before it (a server
  // refusing this end's certificate under TLS 1.3 says so only after the handshake), as
  // " (TLS read failed: tlsv13 alert certificate required)"; "" when none is readable.
  std::string parting_alert();
  size_t read_exact_tls(std::span<std::byte> out, std::chrono::steady_clock::time_point deadline, const char* what);
  void write_all(std::span<const std::span<const std::byte>> pieces, std::chrono::steady_clock::time_point deadline);
  // Reads exactly out.size() bytes; returns how many arrived before the peer closed.
  size_t read_exact(std::span<std::byte> out, std::chrono::steady_clock::time_point deadline, const char* what);
  Frame read_frame(std::chrono::steady_clock::time_point deadline);
  void add_sent(int64_t bytes, int64_t messages);
  void add_received(int64_t bytes, int64_t messages);

  asio::ip::tcp::socket socket_;
  std::string peer_;
  std::string local_address_;
  std::string peer_address_;
  uint32_t max_frame_bytes_ = kDefaultMaxFrameBytes;
  LinkProfile link_;
  std::chrono::steady_clock::time_point link_free_at_{};
  mutable std::mutex counters_mutex_;
  Counters counters_;
  mutable std::mutex close_mutex_;
  std::condition_variable close_cv_;  // wakes a send() waiting on its link
  bool closed_ = false;
  // Declared after socket_, so the session goes first. OpenSSL's SSL object takes one
  // call at a time: the sender and the receiver take turns at it, never while waiting.
  std::unique_ptr<TlsSession> tls_;
  std::mutex tls_mutex_;
  uint64_t tls_read_seen_ = 0;  // raw bytes already counted; guarded by tls_mutex_
  uint64_t tls_written_seen_ = 0;
};

// "127.0.0.1:43210", "[::1]:43210": a peer as log lines and errors name it.
std::string endpoint_text(const asio::ip::tcp::endpoint& endpoint);
// "1.5 s": a deadline as log lines and errors give it.
std::string seconds_text(Deadline d);

// The run's secret: 128 bits from the OS CSPRNG (getrandom), as 32 lowercase hex digits.
std::string make_token();
// Compares two tokens in time that depends on their lengths only, not their contents.
bool tokens_equal(const std::string& a, const std::string& b);

}  // namespace quartet::transport

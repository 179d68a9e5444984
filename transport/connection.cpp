#include "transport/connection.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <system_error>
#include <thread>

namespace quartet::transport {

namespace {

using Clock = std::chrono::steady_clock;

// Owns every socket's service registration; never run (all I/O is non-blocking calls
// plus poll), so one instance serves every connection of the process. Leaked on
// purpose: connections destroyed during static destruction still find it.
asio::io_context& socket_context() {
  static auto* io = new asio::io_context(1);
  return *io;
}

// Waits for `events` on fd until `deadline`; returns false on timeout.
bool poll_until(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return false;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, INT_MAX)));
    if (r > 0) return true;  // ready, or an error/hang-up the next call will report
    if (r < 0 && errno != EINTR) throw std::system_error(errno, std::generic_category(), "poll");
  }
}

bool is_would_block(const asio::error_code& ec) {
  return ec == asio::error::would_block || ec == asio::error::try_again;
}

bool is_peer_gone(const asio::error_code& ec) {
  return ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::error::connection_aborted ||
         ec == asio::error::shut_down;
}

}  // namespace

std::string endpoint_text(const asio::ip::tcp::endpoint& ep) {
  const auto address = ep.address();
  const std::string host = address.is_v6() ? "[" + address.to_string() + "]" : address.to_string();
  return host + ":" + std::to_string(ep.port());
}

std::string seconds_text(Deadline d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g s", std::chrono::duration<double>(d).count());
  return text;
}

std::unique_ptr<Connection> Connection::connect(const std::string& host, uint16_t port, Deadline timeout,
                                               const Tls* tls) {
  const auto deadline = Clock::now() + timeout;
  const std::string where = host + ":" + std::to_string(port);
  asio::error_code ec;
  std::vector<asio::ip::tcp::endpoint> endpoints;
  const auto address = asio::ip::make_address(host, ec);
  if (!ec) {
    endpoints.emplace_back(address, port);
  } else {
    asio::ip::tcp::resolver resolver(socket_context());
    const auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec) throw std::runtime_error("cannot resolve " + where + ": " + ec.message());
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  std::string last_error = "no address";
  for (const auto& ep : endpoints) {
    asio::ip::tcp::socket socket(socket_context());
    socket.open(ep.protocol(), ec);
    if (ec) {
      last_error = ec.message();
      continue;
    }
    socket.non_blocking(true);
    // asio's synchronous connect would wait without a deadline: connect by hand.
    const int fd = socket.native_handle();
    int rc = ::connect(fd, ep.data(), static_cast<socklen_t>(ep.size()));
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      if (!poll_until(fd, POLLOUT, deadline))
        throw std::runtime_error("cannot connect to " + where + ": timed out after " + seconds_text(timeout));
      socklen_t len = sizeof err;
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    // TCP's simultaneous open lets a connection to a local port nobody listens on, inside
    // the ephemeral range, pick that port as its own and connect to itself; it would hold
    // the port the server is about to take. Treated as refused: a retry goes elsewhere.
    if (err == 0) {
      asio::error_code local_ec, remote_ec;
      const auto local = socket.local_endpoint(local_ec), remote = socket.remote_endpoint(remote_ec);
      if (!local_ec && !remote_ec && local == remote) err = ECONNREFUSED;
    }
    if (err == 0 && tls == nullptr) return std::make_unique<Connection>(std::move(socket));
    if (err == 0) {
      auto session = TlsSession::client(*tls, fd, host);
      auto connection = std::make_unique<Connection>(std::move(socket), std::move(session));
      connection->handshake(deadline, timeout);
      return connection;
    }
    last_error = std::strerror(err);
  }
  throw std::runtime_error("cannot connect to " + where + ": " + last_error);
}

Connection::Connection(asio::ip::tcp::socket socket, std::unique_ptr<TlsSession> tls)
    : socket_(socket_context()), tls_(std::move(tls)) {
  if (!socket.is_open()) throw std::invalid_argument("Connection needs an open socket");
  const auto protocol = socket.local_endpoint().protocol();
  socket_.assign(protocol, socket.release());
  socket_.non_blocking(true);
  socket_.set_option(asio::ip::tcp::no_delay(true));
  asio::error_code ec;
  const auto remote = socket_.remote_endpoint(ec);
  peer_ = ec ? "(unconnected)" : endpoint_text(remote);
  if (!ec) peer_address_ = remote.address().to_string();
  const auto local = socket_.local_endpoint(ec);
  if (!ec) local_address_ = local.address().to_string();
}

Connection::~Connection() {
  asio::error_code ec;
  socket_.close(ec);
}

void Connection::close() {
  {
    std::lock_guard lock(close_mutex_);
    if (closed_) return;
    closed_ = true;
    // shutdown, not close: threads blocked in poll() on this descriptor wake up, and the
    // descriptor cannot be reused under them before the destructor runs.
    ::shutdown(socket_.native_handle(), SHUT_RDWR);
  }
  close_cv_.notify_all();
}

bool Connection::is_closed() const {
  std::lock_guard lock(close_mutex_);
  return closed_;
}

Counters Connection::counters() const {
  std::lock_guard lock(counters_mutex_);
  return counters_;
}

std::string Connection::peer() const { return peer_; }
std::string Connection::local_address() const { return local_address_; }
std::string Connection::peer_address() const { return peer_address_; }

void Connection::add_sent(int64_t bytes, int64_t messages) {
  std::lock_guard lock(counters_mutex_);
  counters_.bytes_sent += bytes;
  counters_.messages_sent += messages;
}

void Connection::add_received(int64_t bytes, int64_t messages) {
  std::lock_guard lock(counters_mutex_);
  counters_.bytes_received += bytes;
  counters_.messages_received += messages;
}

void Connection::send(MessageType type, std::span<const std::byte> payload, Deadline timeout) {
  const std::span<const std::byte> pieces[1] = {payload};
  send(type, pieces, timeout);
}

void Connection::send(MessageType type, std::span<const std::span<const std::byte>> pieces, Deadline timeout) {
  if (is_closed()) throw ConnectionClosed("send on a closed connection to " + peer_);
  size_t length = 0;
  for (const auto& piece : pieces) length += piece.size();
  if (length > max_frame_bytes_)
    throw std::invalid_argument(std::string("a ") + message_type_name(type) + " frame of " + std::to_string(length) +
                                " bytes is over the frame limit of " + std::to_string(max_frame_bytes_) +
                                " bytes; split it or raise the limit on both ends");
  std::byte header[kFrameHeaderBytes];
  encode_header(type, pieces, header);

  if (link_.bandwidth_bits_per_s > 0.0 || link_.latency_s > 0.0) {
    // The link carries one frame at a time: this one starts when the previous one is
    // through, takes its serialisation time, and arrives a latency later.
    const double bits = 8.0 * static_cast<double>(kFrameHeaderBytes + length);
    const double serialisation_s = link_.bandwidth_bits_per_s > 0.0 ? bits / link_.bandwidth_bits_per_s : 0.0;
    const auto start = std::max(Clock::now(), link_free_at_);
    link_free_at_ = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(serialisation_s));
    const auto arrival =
        link_free_at_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(link_.latency_s));
    std::unique_lock lock(close_mutex_);
    close_cv_.wait_until(lock, arrival, [&] { return closed_; });
    if (closed_) throw ConnectionClosed("connection to " + peer_ + " closed while its link was busy");
  }

  std::vector<std::span<const std::byte>> all;
  all.reserve(pieces.size() + 1);
  all.emplace_back(header, kFrameHeaderBytes);
  for (const auto& piece : pieces)
    if (!piece.empty()) all.push_back(piece);
  write_all(all, Clock::now() + timeout);
  add_sent(0, 1);
}

void Connection::handshake(Clock::time_point deadline, Deadline timeout) {
  for (;;) {
    TlsSession::Want want;
    try {
      want = tls_call([&] { return TlsSession::Io{tls_->handshake(peer_), 0}; }).want;
    } catch (const std::exception&) {
      close();
      throw;
    }
    if (want == TlsSession::Want::done) return;
    if (!tls_wait(want, deadline)) {
      close();
      throw TimeoutError("TLS handshake with " + peer_ + " timed out after " + seconds_text(timeout) +
                         " (is the server speaking TLS?)");
    }
  }
}

TlsSession::Io Connection::tls_call(const std::function<TlsSession::Io()>& op) {
  std::lock_guard lock(tls_mutex_);
  // Counted before a throw too: what crossed the socket crossed it.
  struct Count {
    Connection& c;
    ~Count() {
      const uint64_t read = c.tls_->raw_bytes_read(), written = c.tls_->raw_bytes_written();
      c.add_received(static_cast<int64_t>(read - c.tls_read_seen_), 0);
      c.add_sent(static_cast<int64_t>(written - c.tls_written_seen_), 0);
      c.tls_read_seen_ = read;
      c.tls_written_seen_ = written;
    }
  } count{*this};
  return op();
}

bool Connection::tls_wait(TlsSession::Want want, Clock::time_point deadline) {
  return poll_until(socket_.native_handle(), want == TlsSession::Want::read ? POLLIN : POLLOUT, deadline);
}

void Connection::write_tls(std::span<const std::span<const std::byte>> pieces, Clock::time_point deadline,
                           size_t total) {
  size_t sent = 0;
  for (const auto& piece : pieces) {
    for (size_t done = 0; done < piece.size();) {
      TlsSession::Io io;
      try {
        io = tls_call([&] { return tls_->write(piece.subspan(done)); });
      } catch (const std::exception& e) {
        const bool local = is_closed();
        const std::string alert = local ? "" : parting_alert();
        close();
        if (local) throw ConnectionClosed("connection to " + peer_ + " closed during a send");
        throw std::runtime_error("send to " + peer_ + " failed after " + std::to_string(sent) + " of " +
                                 std::to_string(total) + " bytes: " + e.what() + alert);
      }
      if (io.want == TlsSession::Want::done) {
        done += io.bytes;
        sent += io.bytes;
      } else if (!tls_wait(io.want, deadline)) {
        close();
        throw TimeoutError("timed out sending to " + peer_ + " after " + std::to_string(sent) + " of " +
                           std::to_string(total) + " bytes (the peer is not reading)");
      }
    }
  }
}

std::string Connection::parting_alert() {
  try {
    std::byte one[1];
    tls_call([&] { return tls_->read(one); });
  } catch (const TlsError& e) {
    return std::string(" (") + e.what() + ")";
  } catch (const std::exception&) {
  }
  return "";
}

void Connection::write_all(std::span<const std::span<const std::byte>> pieces, Clock::time_point deadline) {
  if (tls_) {
    size_t total = 0;
    for (const auto& piece : pieces) total += piece.size();
    write_tls(pieces, deadline, total);
    return;
  }
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(pieces.size());
  size_t total = 0;
  for (const auto& piece : pieces) {
    buffers.emplace_back(piece.data(), piece.size());
    total += piece.size();
  }
  size_t first = 0;
  size_t sent = 0;
  while (first < buffers.size()) {
    asio::error_code ec;
    // One gather write per call: asio hands up to 64 buffers to sendmsg.
    size_t n = socket_.send(std::span<const asio::const_buffer>(buffers).subspan(first), 0, ec);
    if (is_would_block(ec)) {
      if (!poll_until(socket_.native_handle(), POLLOUT, deadline)) {
        close();
        throw TimeoutError("timed out sending to " + peer_ + " after " + std::to_string(sent) + " of " +
                           std::to_string(total) + " bytes (the peer is not reading)");
      }
      continue;
    }
    if (ec == asio::error::interrupted) continue;
    if (ec) {
      const bool local = is_closed();
      close();
      if (local) throw ConnectionClosed("connection to " + peer_ + " closed during a send");
      throw std::runtime_error("send to " + peer_ + " failed after " + std::to_string(sent) + " of " +
                               std::to_string(total) + " bytes: " + ec.message());
    }
    add_sent(static_cast<int64_t>(n), 0);
    sent += n;
    while (n > 0) {
      if (n >= buffers[first].size()) {
        n -= buffers[first].size();
        ++first;
      } else {
        buffers[first] += n;
        n = 0;
      }
    }
    while (first < buffers.size() && buffers[first].size() == 0) ++first;
  }
}

size_t Connection::read_exact_tls(std::span<std::byte> out, Clock::time_point deadline, const char* what) {
  size_t got = 0;
  while (got < out.size()) {
    TlsSession::Io io;
    try {
      io = tls_call([&] { return tls_->read(out.subspan(got)); });
    } catch (const std::exception& e) {
      close();
      throw std::runtime_error(std::string("receiving ") + what + " from " + peer_ + " failed: " + e.what());
    }
    if (io.want == TlsSession::Want::done) {
      if (io.bytes == 0) return got;  // the peer closed
      got += io.bytes;
    } else if (!tls_wait(io.want, deadline)) {
      close();
      throw TimeoutError(std::string("timed out receiving ") + what + " from " + peer_ + " (got " +
                         std::to_string(got) + " of " + std::to_string(out.size()) + " bytes)");
    }
  }
  return got;
}

size_t Connection::read_exact(std::span<std::byte> out, Clock::time_point deadline, const char* what) {
  if (tls_) return read_exact_tls(out, deadline, what);
  size_t got = 0;
  while (got < out.size()) {
    asio::error_code ec;
    const size_t n = socket_.receive(asio::buffer(out.data() + got, out.size() - got), 0, ec);
    if (!ec) {
      add_received(static_cast<int64_t>(n), 0);
      got += n;
      continue;
    }
    if (is_would_block(ec)) {
      if (!poll_until(socket_.native_handle(), POLLIN, deadline)) {
        close();
        throw TimeoutError(std::string("timed out receiving ") + what + " from " + peer_ + " (got " +
                           std::to_string(got) + " of " + std::to_string(out.size()) + " bytes)");
      }
      continue;
    }
    if (ec == asio::error::interrupted) continue;
    if (is_peer_gone(ec)) return got;
    close();
    throw std::runtime_error(std::string("receiving ") + what + " from " + peer_ + " failed: " + ec.message());
  }
  return got;
}

Frame Connection::receive(Deadline timeout) {
  if (is_closed()) throw ConnectionClosed("receive on a closed connection to " + peer_);
  return read_frame(Clock::now() + timeout);
}

std::optional<Frame> Connection::receive_parting_frame(Deadline timeout) {
  // close() only shut the socket down: the descriptor, and what the kernel holds for
  // it, are there until the destructor.
  try {
    return read_frame(Clock::now() + timeout);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

Frame Connection::read_frame(Clock::time_point deadline) {
  std::byte header_bytes[kFrameHeaderBytes];
  const size_t got = read_exact(header_bytes, deadline, "a frame header");
  if (got < kFrameHeaderBytes) {
    const bool local = is_closed();
    close();
    if (local) throw ConnectionClosed("connection to " + peer_ + " closed during a receive");
    if (got == 0) throw ConnectionClosed("peer " + peer_ + " closed the connection");
    throw FrameError("truncated frame header from " + peer_ + ": the peer closed after " + std::to_string(got) +
                     " of " + std::to_string(kFrameHeaderBytes) + " bytes");
  }
  FrameHeader header;
  try {
    header = decode_header(std::span<const std::byte, kFrameHeaderBytes>(header_bytes), max_frame_bytes_);
  } catch (const FrameError& e) {
    close();
    throw FrameError(std::string(e.what()) + " from " + peer_);
  }
  // Allocated only now that the length is known to be within the limit.
  Frame frame{header.type, std::vector<std::byte>(header.length)};
  const size_t payload_got = read_exact(frame.payload, deadline, "a frame payload");
  if (payload_got < header.length) {
    const bool local = is_closed();
    close();
    if (local) throw ConnectionClosed("connection to " + peer_ + " closed during a receive");
    throw FrameError(std::string("truncated ") + message_type_name(header.type) + " frame from " + peer_ +
                     ": the peer closed after " + std::to_string(payload_got) + " of " +
                     std::to_string(header.length) + " payload bytes");
  }
  try {
    check_payload(header, frame.payload);
  } catch (const FrameError& e) {
    close();
    throw FrameError(std::string(e.what()) + " from " + peer_);
  }
  add_received(0, 1);
  return frame;
}

std::string make_token() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // getrandom unavailable (old kernel, seccomp): fall back to the device
    }
  }
  if (got < sizeof bytes) {
    const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "make_token: /dev/urandom");
    got = 0;
    while (got < sizeof bytes) {
      const ssize_t n = ::read(fd, bytes + got, sizeof bytes - got);
      if (n > 0) {
        got += static_cast<size_t>(n);
      } else if (!(n < 0 && errno == EINTR)) {
        ::close(fd);
        throw std::runtime_error("make_token: short read from /dev/urandom");
      }
    }
    ::close(fd);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string token(32, '0');
  for (size_t i = 0; i < sizeof bytes; ++i) {
    token[2 * i] = kHex[bytes[i] >> 4];
    token[2 * i + 1] = kHex[bytes[i] & 0xF];
  }
  return token;
}

bool tokens_equal(const std::string& a, const std::string& b) {
  // Touch every byte of the longer one whatever the contents, so the time says nothing
  // about where the first difference is.
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace quartet::transport

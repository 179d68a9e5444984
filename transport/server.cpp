#include "transport/server.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <stdexcept>

namespace quartet::transport {

namespace {

using Clock = std::chrono::steady_clock;

asio::ip::tcp::endpoint listen_endpoint(const ServerOptions& options) {
  asio::error_code ec;
  const auto address = asio::ip::make_address(options.address, ec);
  if (ec) throw std::invalid_argument("server address \"" + options.address + "\" is not an IP address: " + ec.message());
  return {address, options.port};
}

// Reasons refusals are counted by in the log's summaries.
const std::string kNoHello = "no hello in time";
const std::string kClosedEarly = "closed before the hello";
const std::string kBadHello = "bad hello";
const std::string kWrongToken = "wrong token";
const std::string kOtherVersion = "another protocol version";
const std::string kAddressFull = "over the per-address cap";
const std::string kShareFull = "over the unauthenticated cap";
const std::string kNoSlot = "too many connections";
const std::string kStopping = "server shutting down";
const std::string kPlaintext = "plaintext to a TLS server";
const std::string kTlsFailed = "TLS handshake failed";

// Best effort, and never a wait on the accept thread: one non-blocking send, which the
// empty buffer of a connection that was only read from takes whole; then the close.
// Through `tls` when the connection has finished its handshake.
void tell_and_close(asio::ip::tcp::socket& socket, TlsSession* tls, const std::string& text) {
  asio::error_code ec;
  if (!text.empty()) {
    const auto payload = encode_message(ErrorMessage{text});
    std::byte header[kFrameHeaderBytes];
    encode_header(MessageType::error, payload, header);
    std::vector<std::byte> frame(std::begin(header), std::end(header));
    frame.insert(frame.end(), payload.begin(), payload.end());
    if (tls == nullptr) {
      socket.send(asio::buffer(frame), 0, ec);
    } else {
      try {
        tls->write(frame);
      } catch (const std::exception&) {
      }
    }
  }
  socket.close(ec);
}

}  // namespace

struct Server::Pending {
  Pending(asio::ip::tcp::socket s, asio::io_context& io) : socket(std::move(s)), deadline(io) {}
  asio::ip::tcp::socket socket;
  asio::steady_timer deadline;
  std::string address;  // the peer's IP: what the per-address cap counts
  std::string peer;     // with its port, for the log
  std::byte header_bytes[kFrameHeaderBytes]{};
  FrameHeader header;
  std::vector<std::byte> payload;
  std::unique_ptr<TlsSession> tls;
  bool tls_ready = false;  // handshake done: what it is told goes through tls
  bool released = false;   // no longer unauthenticated: admitted or refused
};

Server::Server(ServerOptions options, Handler handler)
    : options_(std::move(options)),
      handler_(std::move(handler)),
      acceptor_(io_),
      retry_timer_(io_),
      log_timer_(io_),
      refusal_log_(options_.refusal_log_interval, [this](const std::string& line) { log(line); }) {
  if (options_.token.empty()) throw std::invalid_argument("Server needs a token (make_token())");
  if (options_.tls) options_.tls->server_context();  // throws without a certificate
  if (!handler_) throw std::invalid_argument("Server needs a handler");
  if (options_.max_connections == 0 || options_.max_unauthenticated == 0 ||
      options_.max_unauthenticated_per_address == 0)
    throw std::invalid_argument("Server: max_connections, max_unauthenticated and max_unauthenticated_per_address "
                                "must be at least 1");
  const auto endpoint = listen_endpoint(options_);
  const std::string where = options_.address + ":" + std::to_string(options_.port);
  asio::error_code ec;
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error("cannot listen on " + where + ": " + ec.message());
  port_ = acceptor_.local_endpoint().port();
  accept_next();
  accept_thread_ = std::thread([this] { io_.run(); });
}

Server::~Server() { stop(); }

void Server::log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "quartet transport: %s\n", line.c_str());
  }
}

void Server::accept_next() {
  acceptor_.async_accept([this](const asio::error_code& ec, asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors or memory, say: log it and try again shortly, not in a spin.
      log("accept on port " + std::to_string(port_) + " failed: " + ec.message());
      retry_timer_.expires_after(std::chrono::milliseconds(100));
      retry_timer_.async_wait([this](const asio::error_code& timer_ec) {
        if (!timer_ec) accept_next();
      });
      return;
    }
    start_pending(std::move(socket));
    accept_next();
  });
}

void Server::start_pending(asio::ip::tcp::socket socket) {
  asio::error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  if (ec) return;  // gone already; the socket closes as it goes out of scope
  socket.non_blocking(true, ec);
  auto p = std::make_shared<Pending>(std::move(socket), io_);
  p->address = remote.address().to_string();
  p->peer = endpoint_text(remote);
  make_room_for(p->address);
  pending_.push_back(p);
  ++pending_by_address_[p->address];
  pending_count_.store(static_cast<int64_t>(pending_.size()));
  p->deadline.expires_after(options_.hello_timeout);
  p->deadline.async_wait([this, p](const asio::error_code& ec) {
    if (ec || p->released) return;
    const std::string why = "no hello within " + seconds_text(options_.hello_timeout);
    refuse(p, kNoHello, "timed out: " + why, why);
  });
  if (options_.tls)
    expect_tls(p);
  else
    read_header(p);
}

void Server::expect_tls(const PendingPtr& p) {
  p->socket.async_wait(asio::socket_base::wait_read, [this, p](const asio::error_code& ec) {
    if (p->released) return;
    // A TLS connection opens with a handshake record (content type 22).
    std::byte first{};
    const ssize_t n = ec ? 0 : ::recv(p->socket.native_handle(), &first, 1, MSG_PEEK);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return expect_tls(p);
    if (n <= 0) return refuse(p, kClosedEarly, "peer " + p->peer + " closed the connection", "");
    if (first != std::byte{22})
      return refuse(p, kPlaintext, "plaintext from " + p->peer + ": this server speaks TLS only",
                    "this server speaks TLS only: give the role the run's TLS settings (QUARTET_TLS_CERT, "
                    "QUARTET_TLS_KEY, QUARTET_TLS_CA)");
    try {
      p->tls = TlsSession::server(*options_.tls, p->socket.native_handle());
    } catch (const std::exception& e) {
      return refuse(p, kTlsFailed, e.what(), "");
    }
    tls_handshake(p);
  });
}

void Server::tls_handshake(const PendingPtr& p) {
  TlsSession::Want want;
  try {
    want = p->tls->handshake(p->peer);
  } catch (const std::exception& e) {
    return refuse(p, kTlsFailed, e.what(), "");
  }
  if (want == TlsSession::Want::done) {
    p->tls_ready = true;
    return read_header(p);
  }
  const auto wait = want == TlsSession::Want::read ? asio::socket_base::wait_read : asio::socket_base::wait_write;
  p->socket.async_wait(wait, [this, p](const asio::error_code& ec) {
    if (p->released) return;
    if (ec) return refuse(p, kClosedEarly, "peer " + p->peer + " closed the connection", "");
    tls_handshake(p);
  });
}

void Server::read_into(const PendingPtr& p, std::span<std::byte> buffer, ReadDone done) {
  if (p->tls)
    tls_read(p, buffer, 0, std::move(done));
  else
    asio::async_read(p->socket, asio::buffer(buffer.data(), buffer.size()), std::move(done));
}

void Server::tls_read(const PendingPtr& p, std::span<std::byte> buffer, size_t got, ReadDone done) {
  while (got < buffer.size()) {
    TlsSession::Io io;
    try {
      io = p->tls->read(buffer.subspan(got));
    } catch (const std::exception& e) {
      return refuse(p, kBadHello, std::string(e.what()) + " from " + p->peer, "");
    }
    if (io.want == TlsSession::Want::done) {
      if (io.bytes == 0) return done(asio::error::eof, got);
      got += io.bytes;
      continue;
    }
    const auto wait = io.want == TlsSession::Want::read ? asio::socket_base::wait_read : asio::socket_base::wait_write;
    p->socket.async_wait(wait, [this, p, buffer, got, done = std::move(done)](const asio::error_code& ec) {
      if (p->released) return;
      if (ec) return done(ec, got);
      tls_read(p, buffer, got, done);
    });
    return;
  }
  done({}, got);
}

void Server::make_room_for(const std::string& address) {
  const auto it = pending_by_address_.find(address);
  const bool address_full = it != pending_by_address_.end() && it->second >= options_.max_unauthenticated_per_address;
  if (!address_full && pending_.size() < options_.max_unauthenticated) return;
  // The oldest of this address when it is at its cap, else of the address holding the
  // most. The oldest has had longest to send its hello, and a role sends its hello as
  // soon as it is connected: what has waited longest is the likeliest to be idle.
  const std::string from =
      address_full ? address
                   : std::max_element(pending_by_address_.begin(), pending_by_address_.end(),
                                      [](const auto& a, const auto& b) { return a.second < b.second; })
                         ->first;
  const auto oldest =
      std::find_if(pending_.begin(), pending_.end(), [&](const PendingPtr& p) { return p->address == from; });
  const PendingPtr victim = *oldest;  // a copy: refuse() erases it from pending_
  const std::string cap = address_full ? std::to_string(options_.max_unauthenticated_per_address) + " from " + from
                                       : std::to_string(options_.max_unauthenticated) + " in all";
  const std::string why =
      std::string(kBusyRefusal) + "too many connections waiting for their hello (at most " + cap +
      "); this one waited longest";
  refuse(victim, address_full ? kAddressFull : kShareFull, why, why);
}

void Server::read_header(const PendingPtr& p) {
  read_into(p, p->header_bytes, [this, p](const asio::error_code& ec, size_t n) {
    if (p->released) return;
    if (ec) {
      if (n == 0)
        refuse(p, kClosedEarly, "peer " + p->peer + " closed the connection", "");
      else
        refuse(p, kClosedEarly,
               "truncated frame header from " + p->peer + ": the peer closed after " + std::to_string(n) + " of " +
                   std::to_string(kFrameHeaderBytes) + " bytes",
               "");
      return;
    }
    try {
      p->header = decode_header(std::span<const std::byte, kFrameHeaderBytes>(p->header_bytes),
                                options_.max_hello_bytes);
      if (p->header.type != MessageType::hello)
        throw MessageError(std::string("the first frame was a ") + message_type_name(p->header.type) +
                           " frame, not a hello");
    } catch (const FrameError& e) {
      refuse(p, kBadHello, std::string(e.what()) + " from " + p->peer, e.what());
      return;
    }
    // Allocated only now that the length is known to be within the hello limit.
    p->payload.resize(p->header.length);
    read_payload(p);
  });
}

void Server::read_payload(const PendingPtr& p) {
  read_into(p, p->payload, [this, p](const asio::error_code& ec, size_t n) {
    if (p->released) return;
    if (ec) {
      refuse(p, kClosedEarly,
             "truncated hello frame from " + p->peer + ": the peer closed after " + std::to_string(n) + " of " +
                 std::to_string(p->payload.size()) + " payload bytes",
             "");
      return;
    }
    check_hello(p);
  });
}

void Server::check_hello(const PendingPtr& p) {
  Hello hello;
  try {
    check_payload(p->header, p->payload);
    hello = decode_message<Hello>(p->payload);
  } catch (const FrameError& e) {
    refuse(p, kBadHello, std::string(e.what()) + " from " + p->peer, e.what());
    return;
  }
  if (hello.protocol_version != kProtocolVersion) {
    const std::string why = "protocol version " + std::to_string(hello.protocol_version) + ", this server speaks " +
                            std::to_string(kProtocolVersion);
    refuse(p, kOtherVersion, why + " (role \"" + hello.role + "\")", why);
  } else if (!tokens_equal(hello.token, options_.token)) {
    refuse(p, kWrongToken, "wrong token (role \"" + hello.role + "\")", "wrong token");
  } else {
    admit(p, hello);
  }
}

bool Server::release(Pending& p) {
  if (p.released) return false;
  p.released = true;
  asio::error_code ec;
  p.deadline.cancel(ec);
  pending_.remove_if([&](const PendingPtr& q) { return q.get() == &p; });
  if (auto it = pending_by_address_.find(p.address); it != pending_by_address_.end() && --it->second == 0)
    pending_by_address_.erase(it);
  pending_count_.store(static_cast<int64_t>(pending_.size()));
  return true;
}

void Server::refuse(PendingPtr p, const std::string& reason, const std::string& detail,
                    const std::string& tell) {
  if (!release(*p)) return;
  tell_and_close(p->socket, p->tls_ready ? p->tls.get() : nullptr, tell);
  note_refusal(p->address, p->peer, reason, detail);
}

void Server::note_refusal(const std::string& address, const std::string& peer, const std::string& reason,
                          const std::string& detail) {
  refused_.fetch_add(1);
  refusal_log_.refused(address, peer, reason, detail, Clock::now());
  arm_log_timer();
}

void Server::arm_log_timer() {
  const auto end = refusal_log_.window_end();
  if (log_timer_armed_ || !end || stopping()) return;
  log_timer_armed_ = true;
  log_timer_.expires_at(*end);
  log_timer_.async_wait([this](const asio::error_code& ec) {
    log_timer_armed_ = false;
    if (ec) return;
    refusal_log_.tick(Clock::now());
    arm_log_timer();
  });
}

void Server::admit(const PendingPtr& p, const Hello& hello) {
  const std::string* reason = nullptr;
  std::string why;
  {
    std::lock_guard lock(mutex_);
    reap_finished_locked();
    if (stopping_) {
      reason = &kStopping;
      why = "the server is shutting down";
    } else if (workers_.size() >= options_.max_connections) {
      reason = &kNoSlot;
      why = "too many connections (" + grouped(static_cast<int64_t>(workers_.size())) + " in use)";
    }
  }
  if (reason != nullptr) {
    refuse(p, *reason, why + " (role \"" + hello.role + "\")", why);
    return;
  }
  release(*p);
  accepted_.fetch_add(1);
  start_worker(std::move(p->socket), std::move(p->tls), hello);
}

void Server::reap_finished_locked() {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (it->done) {
      // done is the worker's last act under the lock, so this join returns at once.
      if (it->thread.joinable()) it->thread.join();
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
}

void Server::start_worker(asio::ip::tcp::socket socket, std::unique_ptr<TlsSession> tls, Hello hello) {
  std::string failed;
  {
    std::lock_guard lock(mutex_);
    auto& worker = workers_.emplace_back();
    try {
      worker.thread = std::thread(
          [this, &worker, s = std::move(socket), t = std::move(tls), h = std::move(hello)]() mutable {
            serve(std::move(s), std::move(t), h, worker);
          });
    } catch (const std::system_error& e) {
      workers_.pop_back();
      refused_.fetch_add(1);
      failed = std::string("cannot start a connection thread: ") + e.what();
    }
  }
  if (failed.empty()) return;
  log(failed);
  if (options_.on_thread_failure) options_.on_thread_failure(failed);  // outside the lock: it may take its own
}

void Server::serve(asio::ip::tcp::socket socket, std::unique_ptr<TlsSession> tls, const Hello& hello,
                   Worker& worker) {
  std::unique_ptr<Connection> connection;
  try {
    connection = std::make_unique<Connection>(std::move(socket), std::move(tls));
  } catch (const std::exception& e) {
    log(std::string("cannot set up an accepted connection: ") + e.what());
  }
  if (connection) {
    bool stopping_now = false;
    {
      std::lock_guard lock(mutex_);
      worker.connection = connection.get();
      stopping_now = stopping_;
    }
    const std::string peer = connection->peer();
    try {
      if (stopping_now) {
        send_error_and_close(*connection, "the server is shutting down", std::chrono::seconds(1));
      } else {
        connection->set_max_frame_bytes(options_.max_frame_bytes);
        handler_(*connection, hello);
      }
    } catch (const ConnectionClosed&) {
      // A peer that hangs up (or stop()) is the normal end of a handler.
    } catch (const std::exception& e) {
      if (!(connection->is_closed() && stopping()))
        log("connection " + peer + " (role \"" + hello.role + "\"): " + e.what());
    }
    std::lock_guard lock(mutex_);
    worker.connection = nullptr;
  }
  connection.reset();
  std::lock_guard lock(mutex_);
  worker.done = true;
}

bool Server::stopping() const {
  std::lock_guard lock(mutex_);
  return stopping_;
}

void Server::stop() {
  std::lock_guard stop_lock(stop_mutex_);
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  io_.stop();
  if (accept_thread_.joinable()) accept_thread_.join();
  asio::error_code ec;
  acceptor_.close(ec);
  // The accept thread has ended: what it owned is this thread's now.
  while (!pending_.empty()) {
    const auto p = pending_.front();
    refuse(p, kStopping, "the server is shutting down", "the server is shutting down");
  }
  refusal_log_.flush(Clock::now());
  {
    std::lock_guard lock(mutex_);
    for (auto& worker : workers_)
      if (worker.connection != nullptr) worker.connection->close();
  }
  // Join outside the lock: a finishing worker takes it to unregister.
  for (;;) {
    std::thread thread;
    {
      std::lock_guard lock(mutex_);
      for (auto& worker : workers_)
        if (worker.thread.joinable()) {
          thread = std::move(worker.thread);
          break;
        }
    }
    if (!thread.joinable()) break;
    thread.join();
  }
  std::lock_guard lock(mutex_);
  workers_.clear();
}

Server::Stats Server::stats() const {
  Stats stats;
  stats.accepted = accepted_.load();
  stats.refused = refused_.load();
  stats.unauthenticated = pending_count_.load();
  std::lock_guard lock(mutex_);
  for (const auto& worker : workers_)
    if (!worker.done) ++stats.active;
  stats.active += stats.unauthenticated;
  return stats;
}

}  // namespace quartet::transport

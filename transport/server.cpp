#include "transport/server.h"

#include <cstdio>
#include <stdexcept>

namespace quartet::transport {

namespace {

asio::ip::tcp::endpoint listen_endpoint(const ServerOptions& options) {
  asio::error_code ec;
  const auto address = asio::ip::make_address(options.address, ec);
  if (ec) throw std::invalid_argument("server address \"" + options.address + "\" is not an IP address: " + ec.message());
  return {address, options.port};
}

}  // namespace

Server::Server(ServerOptions options, Handler handler)
    : options_(std::move(options)), handler_(std::move(handler)), acceptor_(io_), retry_timer_(io_) {
  if (options_.token.empty()) throw std::invalid_argument("Server needs a token (make_token())");
  if (!handler_) throw std::invalid_argument("Server needs a handler");
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

void Server::refuse(const std::string& peer, const std::string& why) {
  refused_.fetch_add(1);
  log("refused " + peer + ": " + why);
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
    start_worker(std::move(socket));
    accept_next();
  });
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

void Server::start_worker(asio::ip::tcp::socket socket) {
  std::lock_guard lock(mutex_);
  reap_finished_locked();
  if (stopping_) return;
  if (workers_.size() >= options_.max_connections) {
    asio::error_code ec;
    const auto remote = socket.remote_endpoint(ec);
    refuse(ec ? "a peer" : remote.address().to_string() + ":" + std::to_string(remote.port()),
           "already " + std::to_string(workers_.size()) + " connections (max_connections)");
    return;  // the socket closes as it goes out of scope
  }
  auto& worker = workers_.emplace_back();
  try {
    worker.thread = std::thread([this, &worker, s = std::move(socket)]() mutable { serve(std::move(s), worker); });
  } catch (const std::system_error& e) {
    workers_.pop_back();
    refused_.fetch_add(1);
    log(std::string("cannot start a connection thread: ") + e.what());
  }
}

void Server::serve(asio::ip::tcp::socket socket, Worker& worker) {
  std::unique_ptr<Connection> connection;
  try {
    connection = std::make_unique<Connection>(std::move(socket));
  } catch (const std::exception& e) {
    refused_.fetch_add(1);
    log(std::string("cannot set up an accepted connection: ") + e.what());
  }
  if (connection) {
    {
      std::lock_guard lock(mutex_);
      worker.connection = connection.get();
      if (stopping_) connection->close();
    }
    const std::string peer = connection->peer();
    std::string role;
    bool hello_done = false;
    try {
      connection->set_max_frame_bytes(options_.max_hello_bytes);
      const Frame frame = connection->receive(options_.hello_timeout);
      if (frame.type != MessageType::hello)
        throw MessageError(std::string("the first frame was a ") + message_type_name(frame.type) +
                           " frame, not a hello");
      const Hello hello = decode_message<Hello>(frame.payload);
      if (hello.protocol_version != kProtocolVersion) {
        const std::string why = "protocol version " + std::to_string(hello.protocol_version) + ", this server speaks " +
                                std::to_string(kProtocolVersion);
        send_error_and_close(*connection, why, std::chrono::seconds(1));
        refuse(peer, why + " (role \"" + hello.role + "\")");
      } else if (!tokens_equal(hello.token, options_.token)) {
        send_error_and_close(*connection, "wrong token", std::chrono::seconds(1));
        refuse(peer, "wrong token (role \"" + hello.role + "\")");
      } else {
        hello_done = true;
        role = hello.role;
        accepted_.fetch_add(1);
        connection->set_max_frame_bytes(options_.max_frame_bytes);
        handler_(*connection, hello);
      }
    } catch (const ConnectionClosed& e) {
      // After the hello, a peer that hangs up (or stop()) is the normal end of a handler.
      if (!hello_done) refuse(peer, e.what());
    } catch (const std::exception& e) {
      if (!hello_done) {
        refuse(peer, e.what());
      } else if (!(connection->is_closed() && stopping())) {
        log("connection " + peer + " (role \"" + role + "\"): " + e.what());
      }
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
  std::lock_guard lock(mutex_);
  for (const auto& worker : workers_)
    if (!worker.done) ++stats.active;
  return stats;
}

}  // namespace quartet::transport

#pragma once

// A framed TCP server: accepts many connections, makes each one open with a Hello
// carrying the run's token, and hands the accepted ones to a handler, one thread per
// connection. A connection that opens wrongly (garbage, another protocol version, a
// wrong token, a length over the hello limit, or nothing within the hello deadline) is
// closed with one log line; everyone else is served on.

#include <asio.hpp>
#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>

#include "transport/connection.h"
#include "transport/messages.h"

namespace quartet::transport {

struct ServerOptions {
  std::string address = "127.0.0.1";  // where to listen; "0.0.0.0" for every interface
  uint16_t port = 0;                  // 0: the OS chooses (see Server::port())
  std::string token;                  // required: what every Hello must carry
  Deadline hello_timeout = std::chrono::seconds(10);
  uint32_t max_hello_bytes = 64 * 1024;               // frame limit before the hello
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;   // frame limit after it
  size_t max_connections = 1024;                      // more are closed at once
  // One line per refused connection or failed handler; default: stderr.
  std::function<void(const std::string&)> log;
};

class Server {
 public:
  // Runs for every accepted connection on its own thread, after the hello was checked.
  // The connection is closed and destroyed when the handler returns or throws. A
  // ConnectionClosed escaping the handler is the normal end (the peer hung up); any
  // other exception is logged with the peer and role. Other connections are not affected.
  // requires the handler to return once its connection is closed (stop() closes it),
  // and not to call stop() itself.
  using Handler = std::function<void(Connection&, const Hello&)>;

  // Listens on options.address:options.port and starts accepting.
  // throws std::invalid_argument for an empty token or a bad address,
  // std::runtime_error naming the address when it cannot listen.
  Server(ServerOptions options, Handler handler);
  // stop()
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const { return port_; }
  const std::string& address() const { return options_.address; }

  // Stops accepting, closes every connection, and joins every handler. Idempotent.
  void stop();

  struct Stats {
    int64_t accepted = 0;  // connections whose hello was good (handler started)
    int64_t refused = 0;   // connections closed before or at the hello
    int64_t active = 0;    // connections open now, hello done or not
  };
  Stats stats() const;

 private:
  struct Worker {
    std::thread thread;
    Connection* connection = nullptr;  // while open; guarded by mutex_
    bool done = false;
  };

  void accept_next();
  void start_worker(asio::ip::tcp::socket socket);
  void serve(asio::ip::tcp::socket socket, Worker& worker);
  void refuse(const std::string& peer, const std::string& why);
  void log(const std::string& line) const;
  void reap_finished_locked();
  bool stopping() const;

  ServerOptions options_;
  Handler handler_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  uint16_t port_ = 0;
  std::thread accept_thread_;

  std::mutex stop_mutex_;  // one stop() at a time
  mutable std::mutex mutex_;
  std::list<Worker> workers_;
  bool stopping_ = false;
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> refused_{0};
};

}  // namespace quartet::transport

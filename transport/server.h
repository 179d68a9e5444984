#pragma once

// A framed TCP server: accepts many connections, makes each one open with a Hello
// carrying the run's token, and hands the accepted ones to a handler, one thread per
// connection. A connection that opens wrongly (garbage, another protocol version, a
// wrong token, a length over the hello limit, or nothing within the hello deadline) is
// closed; everyone else is served on.
//
// Until its hello is read, a connection is unauthenticated: it costs no thread (the
// accept thread reads every hello, asynchronously) and holds one of a few slots of its
// own, max_unauthenticated in all and max_unauthenticated_per_address from one address.
// A new connection over either cap closes the oldest unauthenticated one (of its own
// address, else of the address holding the most), so idle connections cannot keep a
// role that sends its hello at once from being heard. Only a hello with the token takes
// one of the max_connections slots (and a thread). A refused connection is told why
// with an error frame before it is closed; refusals are logged through a RefusalLog
// (the first in full, then a summary at most every refusal_log_interval).
//
// With TLS set, a connection's first bytes must be a TLS handshake: plaintext is refused
// at once (told so in a plaintext error frame), and a failed handshake (a client
// certificate missing or not from client_ca) is refused and logged with OpenSSL's
// reason. The handshake runs on the accept thread like the hello, within hello_timeout.

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "transport/connection.h"
#include "transport/messages.h"
#include "transport/refusal_log.h"

namespace quartet::transport {

struct ServerOptions {
  std::string address = "127.0.0.1";  // where to listen; "0.0.0.0" for every interface
  uint16_t port = 0;                  // 0: the OS chooses (see Server::port())
  std::string token;                  // required: what every Hello must carry
  std::shared_ptr<const Tls> tls;     // set: TLS only (needs a certificate); null: plain TCP
  Deadline hello_timeout = std::chrono::seconds(10);
  uint32_t max_hello_bytes = 64 * 1024;               // frame limit before the hello
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;   // frame limit after it
  // Connections whose hello carried the token, each with its handler's thread; a hello
  // past them is refused ("too many connections (1,024 in use)").
  size_t max_connections = 1024;
  // Connections still waiting for their hello, in all and from one peer address; a new
  // one past either cap closes the oldest (see above).
  size_t max_unauthenticated = 128;
  size_t max_unauthenticated_per_address = 32;
  // Refusals are logged as one summary line per interval at most (RefusalLog).
  std::chrono::milliseconds refusal_log_interval = std::chrono::seconds(5);
  // Refusal lines and failed handlers; default: stderr.
  std::function<void(const std::string&)> log;
  // Called (on the accepting thread) when a connection's handler thread cannot start
  // (out of threads: EAGAIN), with why; the connection is refused either way. A role whose
  // peers must all be served fails on it instead of waiting for them.
  std::function<void(const std::string&)> on_thread_failure;
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
  // throws std::invalid_argument for an empty token, a bad address or a cap of 0,
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
    int64_t accepted = 0;         // connections whose hello was good (handler started)
    int64_t refused = 0;          // connections closed before or at the hello
    int64_t active = 0;           // connections open now, hello done or not
    int64_t unauthenticated = 0;  // of those, waiting for their hello
  };
  Stats stats() const;

 private:
  struct Worker {
    std::thread thread;
    Connection* connection = nullptr;  // while open; guarded by mutex_
    bool done = false;
  };
  struct Pending;  // an unauthenticated connection; the accept thread's alone
  using PendingPtr = std::shared_ptr<Pending>;

  void accept_next();
  // The hello, step by step, on the accept thread.
  void start_pending(asio::ip::tcp::socket socket);
  // TLS: refuses plaintext, then steps the handshake as the socket allows.
  void expect_tls(const PendingPtr& p);
  void tls_handshake(const PendingPtr& p);
  using ReadDone = std::function<void(const asio::error_code&, size_t)>;
  // Reads buffer whole (through TLS when p has it), then calls done; eof when the peer closed.
  void read_into(const PendingPtr& p, std::span<std::byte> buffer, ReadDone done);
  void tls_read(const PendingPtr& p, std::span<std::byte> buffer, size_t got, ReadDone done);
  void make_room_for(const std::string& address);
  void read_header(const PendingPtr& p);
  void read_payload(const PendingPtr& p);
  void check_hello(const PendingPtr& p);
  void admit(const PendingPtr& p, const Hello& hello);
  // Takes p out of the unauthenticated ones; false if it was already out.
  bool release(Pending& p);
  // Refuses p: `tell` (if any) goes to the peer in an error frame, then it is closed.
  void refuse(PendingPtr p, const std::string& reason, const std::string& detail, const std::string& tell);
  void note_refusal(const std::string& address, const std::string& peer, const std::string& reason,
                    const std::string& detail);
  void arm_log_timer();
  void start_worker(asio::ip::tcp::socket socket, std::unique_ptr<TlsSession> tls, Hello hello);
  void serve(asio::ip::tcp::socket socket, std::unique_ptr<TlsSession> tls, const Hello& hello, Worker& worker);
  void log(const std::string& line) const;
  void reap_finished_locked();
  bool stopping() const;

  ServerOptions options_;
  Handler handler_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  asio::steady_timer log_timer_;
  bool log_timer_armed_ = false;
  uint16_t port_ = 0;
  std::thread accept_thread_;

  // The accept thread's (stop()'s once it has ended): oldest first.
  std::list<PendingPtr> pending_;
  std::map<std::string, size_t> pending_by_address_;
  RefusalLog refusal_log_;
  std::atomic<int64_t> pending_count_{0};  // pending_.size(), for stats()

  std::mutex stop_mutex_;  // one stop() at a time
  mutable std::mutex mutex_;
  std::list<Worker> workers_;
  bool stopping_ = false;
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> refused_{0};
};

}  // namespace quartet::transport

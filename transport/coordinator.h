#pragma once

// The run's coordinator and its client.
//
// `quartet run` starts one Coordinator in process: a Server (every connection opens with
// a hello carrying the run's token) plus
//   - a key-value store with blocking gets, for collective bootstrap (Gloo's store keys,
//     the NCCL unique id);
//   - role registration: a role asks to join arm X as role R and gets a rank, the next
//     free one or the one it asked for;
//   - step records from remote roles, handed to a callback (the launcher writes them
//     into the role's .jsonl);
//   - heartbeats: a registered role silent past the deadline, or whose connection drops
//     without a goodbye, is reported vanished, by name, once.
// Roles (processes of this host or others) talk to it through a CoordinatorClient.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "transport/frame.h"
#include "transport/tls.h"

namespace quartet::transport {

class Connection;

struct RoleId {
  std::string arm;
  std::string role;
  int rank = -1;
  std::string name() const { return arm + "/" + role + " (rank " + std::to_string(rank) + ")"; }
};

struct RoleStatus {
  RoleId id;
  std::string peer;       // "127.0.0.1:43210"
  bool connected = false;
  bool vanished = false;  // reported to on_vanished
  bool left = false;      // said goodbye
};

struct CoordinatorOptions {
  std::string host = "127.0.0.1";  // listen address; another host's roles need a reachable one
  uint16_t port = 0;               // 0: a fresh port from the OS
  std::string token;               // empty: a fresh make_token()
  std::shared_ptr<const Tls> tls;  // set: roles connect with TLS (Server's ServerOptions::tls)
  // A registered role that sends nothing (not even a heartbeat) for this long has vanished.
  std::chrono::milliseconds heartbeat_timeout = std::chrono::seconds(15);
  // Called for every step record a remote role sends, in the order that role sent them;
  // calls are serialised (never two at once), so the callee needs no lock.
  std::function<void(const RoleId& from, std::string_view record)> on_record;
  // Called once per vanished role, with the reason ("no heartbeat for 15 s",
  // "connection lost: ..."); serialised like on_record.
  std::function<void(const RoleId& role, const std::string& reason)> on_vanished;
  // Connections whose hello carried the token; past them a role is refused, "too many
  // connections (1,024 in use)" (ServerOptions::max_connections; the server's caps on
  // connections yet to say hello are its defaults).
  size_t max_connections = 1024;
  // The server's log lines (refusal summaries, failed handlers); default: stderr.
  std::function<void(const std::string&)> log;
  // A role's connection could not be served: no thread for it (ServerOptions::on_thread_failure).
  std::function<void(const std::string&)> on_thread_failure;
};

class Coordinator {
 public:
  // Listening when it returns; throws std::runtime_error when the address is unusable.
  explicit Coordinator(CoordinatorOptions options);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  const std::string& host() const { return options_.host; }
  uint16_t port() const;
  const std::string& token() const { return options_.token; }
  const std::shared_ptr<const Tls>& tls() const { return options_.tls; }  // null: plain TCP
  std::string address() const;  // "127.0.0.1:40123"

  // The same store remote roles use. kv_get waits up to `wait` for the key; nullopt
  // when it is still missing then.
  void kv_set(const std::string& key, std::string value);
  std::optional<std::string> kv_get(const std::string& key, std::chrono::milliseconds wait) const;

  std::vector<RoleStatus> roles() const;
  // Waits until `count` roles of `arm` have registered; false on timeout.
  bool wait_for_roles(const std::string& arm, int count, std::chrono::milliseconds timeout) const;
  int64_t records_received() const;

  // Says which ranks an arm has: ranks at or past world_size are refused, and every
  // role of the arm gets world_size and settings_json in its welcome. Arms not declared
  // take any rank and welcome with world_size 0.
  void declare_arm(const std::string& arm, int world_size, std::string settings_json = "{}");

  // Closes every connection and stops listening. Idempotent; the destructor calls it.
  void stop();

 private:
  struct Impl;
  CoordinatorOptions options_;
  std::unique_ptr<Impl> impl_;
};

struct ClientOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string token;            // empty: the environment's QUARTET_TOKEN
  // Set: TLS to the coordinator, whose certificate must name `host`. A role's servers and
  // its connections to other roles use the same settings.
  std::shared_ptr<const Tls> tls;
  std::string arm;              // register as this arm's role...
  std::string role;             // ...(empty role: connect without registering)
  int requested_rank = -1;      // -1: the next free rank
  // 0: none; the coordinator then drops the connection once it has been silent for its
  // heartbeat_timeout (and reports a registered role vanished).
  std::chrono::milliseconds heartbeat_interval = std::chrono::seconds(1);
  std::chrono::milliseconds timeout = std::chrono::seconds(30);  // connect and each reply
};

// The coordinator refused a role's hello or registration (a refusal other than busy);
// what() names the coordinator, the role and the coordinator's reason.
class CoordinatorRefused : public std::runtime_error {
 public:
  CoordinatorRefused(const std::string& what, std::string reason)
      : std::runtime_error(what), reason_(std::move(reason)) {}
  const std::string& reason() const { return reason_; }
  // The role is connected already, from another process: a twin of a running role.
  bool twin() const { return reason_.find(kAlreadyConnected) != std::string::npos; }
  static constexpr std::string_view kAlreadyConnected = " is already connected from ";

 private:
  std::string reason_;
};

// Parses "HOST:PORT" (IPv4 or a name); throws std::invalid_argument saying what is wrong.
std::pair<std::string, uint16_t> parse_host_port(const std::string& address);

// The key under which the coordinator keeps the first role of `arm` that vanished (its
// connection lost without a goodbye): "ROLE (REASON)". Roles whose collectives fail read
// it to name the peer that went away.
inline std::string vanished_key(const std::string& arm) { return "vanished/" + arm; }

// This host's address as other hosts reach it: the first IPv4 address of an interface
// that is up and not loopback; "127.0.0.1" when there is none.
std::string routable_address();
// Whether `host` stands for every interface ("0.0.0.0", "::", ""), which another host
// cannot connect to.
bool is_any_address(const std::string& host);

// A role's connection to the coordinator. Thread-safe: requests from several threads are
// serialised; heartbeats go out from a background thread.
class CoordinatorClient {
 public:
  // Connects, says hello with the token and, when options.role is set, registers. A busy
  // refusal (too many connections yet to say hello: kBusyRefusal) is tried again until
  // options.timeout. Throws std::runtime_error when the coordinator is unreachable or
  // refuses, with its reason: "the coordinator at 127.0.0.1:40123 refused role rank0:
  // too many connections (1,024 in use)".
  explicit CoordinatorClient(ClientOptions options);
  ~CoordinatorClient();  // leave() if still connected, errors swallowed
  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  int rank() const { return rank_; }  // -1 when not registered
  int world_size() const { return world_size_; }  // 0 when the arm was not declared
  const std::string& settings_json() const { return settings_json_; }
  const ClientOptions& options() const { return options_; }
  // The address this host reaches the coordinator from, and the coordinator's address it
  // reached (Connection::local_address, peer_address).
  std::string local_address() const;
  std::string coordinator_address() const;

  void kv_set(const std::string& key, std::string_view value);
  // Waits up to `wait` (at most a day) for the key; nullopt when it is still missing then.
  std::optional<std::string> kv_get(const std::string& key, std::chrono::milliseconds wait);
  // Like kv_get, but throws std::runtime_error naming the key on timeout.
  std::string kv_wait(const std::string& key, std::chrono::milliseconds wait);
  // One step record (a JSON object on one line); the coordinator hands it on in order.
  void send_record(std::string_view record);
  // Says goodbye and waits until the coordinator has handled everything sent before, so
  // no record is lost; then closes. Idempotent.
  void leave();
  // Drops the connection without a goodbye (tests: a role that crashed).
  void abandon();

 private:
  // Hello and registration on a fresh connection_; throws RemoteError on a refusal.
  void join();
  std::vector<std::byte> request(MessageType type, std::span<const std::byte> payload, MessageType expect,
                                 std::chrono::milliseconds reply_timeout);
  void send_frame(MessageType type, std::span<const std::byte> payload);
  void stop_heartbeats();

  ClientOptions options_;
  std::unique_ptr<Connection> connection_;
  int rank_ = -1;
  int world_size_ = 0;
  std::string settings_json_;
  std::mutex request_mutex_;  // one request and its reply at a time
  std::mutex send_mutex_;     // requests and heartbeats share the socket
  std::mutex heartbeat_mutex_;
  std::condition_variable heartbeat_cv_;
  bool stopping_heartbeats_ = false;
  std::atomic<bool> left_{false};
  std::thread heartbeat_thread_;
};

}  // namespace quartet::transport

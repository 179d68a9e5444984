#include "transport/coordinator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>

#include "transport/connection.h"
#include "transport/coordinator_protocol.h"
#include "transport/messages.h"
#include "transport/server.h"

namespace quartet::transport {

using namespace coordinator_protocol;
using Clock = std::chrono::steady_clock;

namespace coordinator_detail {

// One accepted connection. `connection` is valid while its handler runs; other threads
// (replying to a kv_get when the key arrives) send under send_mutex and check it.
struct Peer {
  std::mutex send_mutex;
  Connection* connection = nullptr;
  std::string address;
  RoleId id;
  bool registered = false;
  bool left = false;      // said goodbye
  bool vanished = false;  // reported
  bool open = true;       // handler still running
};

struct Waiter {
  std::shared_ptr<Peer> peer;
  Clock::time_point deadline;
};

struct ArmRanks {
  int world_size = 0;  // 0: not declared
  std::string settings_json = "{}";
  std::map<int, std::shared_ptr<Peer>> by_rank;
  std::map<std::string, int> rank_of_role;
};

}  // namespace coordinator_detail

using namespace coordinator_detail;

struct Coordinator::Impl {
  CoordinatorOptions& options;
  explicit Impl(CoordinatorOptions& o) : options(o) {}

  std::unique_ptr<Server> server;

  mutable std::mutex mutex;  // everything below
  mutable std::condition_variable cv;  // kv and registrations changed, or stopping
  std::map<std::string, std::string> kv;
  std::multimap<std::string, Waiter> waiters;
  std::map<std::string, ArmRanks> arms;
  bool stopping = false;

  std::mutex callback_mutex;  // serialises on_record and on_vanished
  int64_t records = 0;        // guarded by callback_mutex

  std::thread expiry_thread;

  void serve(Connection& connection, const Hello& hello);
  void handle_register(const std::shared_ptr<Peer>& peer, const Frame& frame);
  void handle_kv_set(const std::shared_ptr<Peer>& peer, const Frame& frame);
  void handle_kv_get(const std::shared_ptr<Peer>& peer, const Frame& frame);
  void handle_record(const std::shared_ptr<Peer>& peer, const Frame& frame);
  void set(const std::string& key, std::string value);
  void expire_waiters();
};

namespace {

template <class T>
void send_to(Peer& peer, MessageType type, const T& message) {
  const auto bytes = encode_message(message);
  std::lock_guard lock(peer.send_mutex);
  if (peer.connection == nullptr) return;
  try {
    peer.connection->send(type, bytes, kReplyTimeout);
  } catch (const std::exception&) {
    // The peer is gone or stuck; its handler notices and cleans up.
  }
}

void refuse(Peer& peer, const std::string& why) {
  std::lock_guard lock(peer.send_mutex);
  if (peer.connection != nullptr) send_error_and_close(*peer.connection, why, kReplyTimeout);
}

}  // namespace

void Coordinator::Impl::set(const std::string& key, std::string value) {
  std::vector<std::shared_ptr<Peer>> ready;
  KvReply reply{key, true, value};
  {
    std::lock_guard lock(mutex);
    kv[key] = std::move(value);
    auto [first, last] = waiters.equal_range(key);
    for (auto it = first; it != last; ++it) ready.push_back(it->second.peer);
    waiters.erase(first, last);
  }
  cv.notify_all();
  for (auto& p : ready) send_to(*p, MessageType::kv_value, reply);
}

void Coordinator::Impl::handle_kv_set(const std::shared_ptr<Peer>& peer, const Frame& frame) {
  auto m = decode_message<KvSet>(frame.payload);
  set(m.key, std::move(m.value));
  send_to(*peer, MessageType::kv_value, KvReply{m.key, true, {}});
}

void Coordinator::Impl::handle_kv_get(const std::shared_ptr<Peer>& peer, const Frame& frame) {
  const auto m = decode_message<KvGet>(frame.payload);
  KvReply reply{m.key, false, {}};
  {
    std::lock_guard lock(mutex);
    if (auto it = kv.find(m.key); it != kv.end()) {
      reply.found = true;
      reply.value = it->second;
    } else if (m.wait_ms > 0) {
      // Answered by set() when the key arrives, or by the expiry thread at the deadline;
      // meanwhile this handler keeps reading (heartbeats, records).
      waiters.emplace(m.key, Waiter{peer, Clock::now() + clamp_wait(std::chrono::milliseconds(m.wait_ms))});
      cv.notify_all();
      return;
    }
  }
  send_to(*peer, MessageType::kv_value, reply);
}

void Coordinator::Impl::expire_waiters() {
  std::unique_lock lock(mutex);
  while (!stopping) {
    auto next = Clock::time_point::max();
    for (const auto& [key, w] : waiters) next = std::min(next, w.deadline);
    if (next == Clock::time_point::max())
      cv.wait(lock);
    else
      cv.wait_until(lock, next);
    const auto now = Clock::now();
    std::vector<std::pair<std::string, std::shared_ptr<Peer>>> expired;
    for (auto it = waiters.begin(); it != waiters.end();) {
      if (it->second.deadline <= now) {
        expired.emplace_back(it->first, it->second.peer);
        it = waiters.erase(it);
      } else {
        ++it;
      }
    }
    if (expired.empty()) continue;
    lock.unlock();
    for (auto& [key, peer] : expired) send_to(*peer, MessageType::kv_value, KvReply{key, false, {}});
    lock.lock();
  }
}

void Coordinator::Impl::handle_register(const std::shared_ptr<Peer>& peer, const Frame& frame) {
  const auto m = decode_message<RegisterRole>(frame.payload);
  Welcome welcome;
  welcome.rank = -1;
  std::string refusal;
  {
    std::lock_guard lock(mutex);
    if (stopping) {
      refusal = "the coordinator is shutting down";
    } else if (peer->registered) {
      refusal = "already registered as " + peer->id.name();
    } else if (!m.role.empty()) {
      ArmRanks& arm = arms[m.arm];
      int rank = -1;
      if (auto it = arm.rank_of_role.find(m.role); it != arm.rank_of_role.end()) {
        // The same role again: a restart gets its old rank back, a twin is refused.
        const auto& old = arm.by_rank.at(it->second);
        if (old->open && !old->left)
          refusal = "role " + m.role + " of arm " + m.arm + std::string(CoordinatorRefused::kAlreadyConnected) +
                    old->address;
        else if (m.requested_rank >= 0 && m.requested_rank != it->second)
          refusal = "role " + m.role + " of arm " + m.arm + " had rank " + std::to_string(it->second) +
                    ", cannot take rank " + std::to_string(m.requested_rank);
        else
          rank = it->second;
      } else if (m.requested_rank >= 0) {
        if (arm.world_size > 0 && m.requested_rank >= arm.world_size)
          refusal = "rank " + std::to_string(m.requested_rank) + " is outside arm " + m.arm + " (ranks 0.." +
                    std::to_string(arm.world_size - 1) + ")";
        else if (auto taken = arm.by_rank.find(m.requested_rank); taken != arm.by_rank.end())
          refusal = "rank " + std::to_string(m.requested_rank) + " of arm " + m.arm + " is taken by role " +
                    taken->second->id.role;
        else
          rank = m.requested_rank;
      } else {
        rank = 0;
        while (arm.by_rank.contains(rank)) ++rank;
        if (arm.world_size > 0 && rank >= arm.world_size)
          refusal = "arm " + m.arm + " is full (" + std::to_string(arm.world_size) + " ranks)";
      }
      if (refusal.empty()) {
        peer->id = RoleId{m.arm, m.role, rank};
        peer->registered = true;
        arm.by_rank[rank] = peer;
        arm.rank_of_role[m.role] = rank;
        welcome.rank = rank;
        welcome.world_size = arm.world_size;
        welcome.settings_json = arm.settings_json;
      }
    }
  }
  if (!refusal.empty()) {
    refuse(*peer, refusal);  // the client says whose refusal it is
    return;
  }
  cv.notify_all();
  send_to(*peer, MessageType::welcome, welcome);
}

void Coordinator::Impl::handle_record(const std::shared_ptr<Peer>& peer, const Frame& frame) {
  if (!peer->registered) {
    refuse(*peer, "coordinator: a step record from a connection that did not register a role");
    return;
  }
  const std::string_view record(reinterpret_cast<const char*>(frame.payload.data()), frame.payload.size());
  std::lock_guard lock(callback_mutex);
  ++records;
  if (options.on_record) options.on_record(peer->id, record);
}

void Coordinator::Impl::serve(Connection& connection, const Hello& /*hello*/) {
  auto peer = std::make_shared<Peer>();
  peer->connection = &connection;
  peer->address = connection.peer();
  std::string reason;
  try {
    for (;;) {
      Frame frame;
      try {
        frame = connection.receive(options.heartbeat_timeout);
      } catch (const TimeoutError&) {
        reason = "no heartbeat for " + format_seconds(options.heartbeat_timeout) + " s";
        break;
      } catch (const ConnectionClosed&) {
        reason = "connection closed without a goodbye";
        break;
      }
      switch (frame.type) {
        case MessageType::heartbeat: break;
        case MessageType::control: handle_register(peer, frame); break;
        case MessageType::kv_set: handle_kv_set(peer, frame); break;
        case MessageType::kv_get: handle_kv_get(peer, frame); break;
        case MessageType::step_record: handle_record(peer, frame); break;
        case MessageType::shutdown: {
          {
            std::lock_guard lock(mutex);
            peer->left = true;
          }
          std::lock_guard lock(peer->send_mutex);
          connection.send(MessageType::shutdown, std::span<const std::byte>{}, kReplyTimeout);
          break;
        }
        default:
          reason = std::string("sent an unexpected ") + message_type_name(frame.type) + " frame";
          refuse(*peer, "coordinator: " + reason);
          break;
      }
      if (peer->left || connection.is_closed()) break;
    }
  } catch (const std::exception& e) {
    reason = std::string("connection lost: ") + e.what();
  }
  bool report = false;
  {
    std::lock_guard lock(mutex);
    for (auto it = waiters.begin(); it != waiters.end();)
      it = it->second.peer == peer ? waiters.erase(it) : std::next(it);
    peer->open = false;
    if (peer->registered && !peer->left && !stopping && !peer->vanished) {
      peer->vanished = true;
      report = true;
    }
  }
  {
    std::lock_guard lock(peer->send_mutex);
    peer->connection = nullptr;
  }
  if (!report) return;
  if (reason.empty()) reason = "connection closed without a goodbye";
  // The arm's first role to vanish, for its peers to name when their collectives fail.
  const std::string key = vanished_key(peer->id.arm);
  bool first = false;
  {
    std::lock_guard lock(mutex);
    first = kv.find(key) == kv.end();
  }
  if (first) set(key, peer->id.role + " (" + reason + ")");
  if (options.on_vanished) {
    std::lock_guard lock(callback_mutex);
    options.on_vanished(peer->id, reason);
  }
}

Coordinator::Coordinator(CoordinatorOptions options) : options_(std::move(options)) {
  if (options_.token.empty()) options_.token = make_token();
  if (options_.heartbeat_timeout <= std::chrono::milliseconds(0))
    throw std::invalid_argument("coordinator: heartbeat_timeout must be positive");
  impl_ = std::make_unique<Impl>(options_);
  impl_->expiry_thread = std::thread([this] { impl_->expire_waiters(); });
  ServerOptions so;
  so.address = options_.host;
  so.port = options_.port;
  so.token = options_.token;
  so.tls = options_.tls;
  so.max_connections = options_.max_connections;
  so.log = options_.log;
  so.on_thread_failure = options_.on_thread_failure;
  try {
    impl_->server = std::make_unique<Server>(so, [this](Connection& c, const Hello& h) { impl_->serve(c, h); });
  } catch (...) {
    stop();
    throw;
  }
}

Coordinator::~Coordinator() { stop(); }

void Coordinator::stop() {
  if (!impl_) return;
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopping && !impl_->expiry_thread.joinable()) return;
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->server) impl_->server->stop();
  if (impl_->expiry_thread.joinable()) impl_->expiry_thread.join();
}

uint16_t Coordinator::port() const { return impl_->server ? impl_->server->port() : 0; }

std::string Coordinator::address() const { return options_.host + ":" + std::to_string(port()); }

void Coordinator::kv_set(const std::string& key, std::string value) { impl_->set(key, std::move(value)); }

std::optional<std::string> Coordinator::kv_get(const std::string& key, std::chrono::milliseconds wait) const {
  std::unique_lock lock(impl_->mutex);
  std::optional<std::string> out;
  impl_->cv.wait_for(lock, clamp_wait(wait), [&] {
    if (auto it = impl_->kv.find(key); it != impl_->kv.end()) out = it->second;
    return out.has_value() || impl_->stopping;
  });
  return out;
}

void Coordinator::declare_arm(const std::string& arm, int world_size, std::string settings_json) {
  if (world_size < 1) throw std::invalid_argument("coordinator: arm " + arm + " needs at least one rank");
  std::lock_guard lock(impl_->mutex);
  ArmRanks& a = impl_->arms[arm];
  a.world_size = world_size;
  a.settings_json = std::move(settings_json);
}

std::vector<RoleStatus> Coordinator::roles() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<RoleStatus> out;
  for (const auto& [name, arm] : impl_->arms) {
    for (const auto& [rank, p] : arm.by_rank) {
      RoleStatus s;
      s.id = p->id;
      s.peer = p->address;
      s.connected = p->open && !p->left;
      s.vanished = p->vanished;
      s.left = p->left;
      out.push_back(std::move(s));
    }
  }
  return out;
}

bool Coordinator::wait_for_roles(const std::string& arm, int count, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mutex);
  return impl_->cv.wait_for(lock, clamp_wait(timeout), [&] {
    auto it = impl_->arms.find(arm);
    return it != impl_->arms.end() && static_cast<int>(it->second.by_rank.size()) >= count;
  });
}

int64_t Coordinator::records_received() const {
  std::lock_guard lock(impl_->callback_mutex);
  return impl_->records;
}

}  // namespace quartet::transport

// The role's side of the coordinator protocol (transport/coordinator_protocol.h).

#include "transport/coordinator.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <thread>

#include "transport/connection.h"
#include "transport/coordinator_protocol.h"
#include "transport/messages.h"

namespace quartet::transport {

using namespace coordinator_protocol;

namespace {

// After a busy refusal a client tries again, 10 ms later at first, doubling up to 0.5 s,
// each wait stretched by up to half at random so that a burst of refused roles spreads.
constexpr std::chrono::milliseconds kFirstBusyBackoff{10};
constexpr std::chrono::milliseconds kLastBusyBackoff{500};

std::chrono::milliseconds jittered(std::chrono::milliseconds wait) {
  thread_local std::minstd_rand random(std::random_device{}());
  return wait + std::chrono::milliseconds(random() % (wait.count() / 2 + 1));
}

}  // namespace

std::string routable_address() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "127.0.0.1";
  std::string found = "127.0.0.1";
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if (!(a->ifa_flags & IFF_UP) || (a->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    found = text;
    break;
  }
  freeifaddrs(list);
  return found;
}

bool is_any_address(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "::"; }

std::pair<std::string, uint16_t> parse_host_port(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    throw std::invalid_argument("coordinator address \"" + address + "\": expected HOST:PORT");
  const std::string port_text = address.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (*end != '\0' || port < 1 || port > 65535)
    throw std::invalid_argument("coordinator address \"" + address + "\": port must be 1..65535");
  return {address.substr(0, colon), static_cast<uint16_t>(port)};
}

CoordinatorClient::CoordinatorClient(ClientOptions options) : options_(std::move(options)) {
  if (options_.token.empty()) {
    const char* t = std::getenv("QUARTET_TOKEN");
    if (t == nullptr || *t == '\0')
      throw std::invalid_argument("no run token: set QUARTET_TOKEN (quartet run passes it to its roles)");
    options_.token = t;
  }
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  const std::string who = options_.role.empty() ? std::string("a connection") : "role " + options_.role;
  const auto give_up = std::chrono::steady_clock::now() + options_.timeout;
  for (auto backoff = kFirstBusyBackoff;; backoff = std::min(2 * backoff, kLastBusyBackoff)) {
    connection_ = Connection::connect(options_.host, options_.port, options_.timeout, options_.tls.get());
    try {
      join();
      break;
    } catch (const RemoteError& e) {
      connection_->close();
      // Busy: the coordinator had too many connections yet to say hello, and closed this
      // one to make room. Another try is likely to get in.
      const auto wait = jittered(backoff);
      if (e.text().starts_with(kBusyRefusal) && std::chrono::steady_clock::now() + wait < give_up) {
        std::this_thread::sleep_for(wait);
        continue;
      }
      throw CoordinatorRefused("the coordinator at " + where + " refused " + who + ": " + e.text(), e.text());
    } catch (const std::exception& e) {
      connection_->close();
      throw std::runtime_error(who + " could not join the coordinator at " + where + ": " + e.what());
    }
  }
  if (options_.heartbeat_interval > std::chrono::milliseconds(0)) {
    heartbeat_thread_ = std::thread([this] {
      std::unique_lock lock(heartbeat_mutex_);
      while (!heartbeat_cv_.wait_for(lock, options_.heartbeat_interval, [&] { return stopping_heartbeats_; })) {
        lock.unlock();
        try {
          send_frame(MessageType::heartbeat, {});
        } catch (const std::exception&) {
          return;  // the connection is gone; requests will say so
        }
        lock.lock();
      }
    });
  }
}

void CoordinatorClient::join() {
  try {
    send_message(*connection_, MessageType::hello, Hello{options_.token, options_.role.empty() ? "client" : options_.role},
                 options_.timeout);
    send_message(*connection_, MessageType::control, RegisterRole{options_.arm, options_.role, options_.requested_rank},
                 options_.timeout);
  } catch (const std::exception&) {
    // A coordinator that refuses a connection says why, then closes, maybe before these
    // frames reached it: the send then fails (broken pipe, reset), and the reason is in
    // the frame it left behind.
    const auto parting = connection_->receive_parting_frame(kPartingWait);
    if (parting && parting->type == MessageType::error)
      expect_type(*parting, MessageType::welcome, connection_->peer());  // throws RemoteError with its text
    throw;
  }
  const Welcome w = receive_message<Welcome>(*connection_, MessageType::welcome, options_.timeout);
  rank_ = w.rank;
  world_size_ = w.world_size;
  settings_json_ = w.settings_json;
}

CoordinatorClient::~CoordinatorClient() {
  try {
    leave();
  } catch (const std::exception&) {
  }
  stop_heartbeats();
}

void CoordinatorClient::stop_heartbeats() {
  {
    std::lock_guard lock(heartbeat_mutex_);
    stopping_heartbeats_ = true;
  }
  heartbeat_cv_.notify_all();
  if (heartbeat_thread_.joinable() && heartbeat_thread_.get_id() != std::this_thread::get_id())
    heartbeat_thread_.join();
}

void CoordinatorClient::send_frame(MessageType type, std::span<const std::byte> payload) {
  std::lock_guard lock(send_mutex_);
  connection_->send(type, payload, options_.timeout);
}

std::vector<std::byte> CoordinatorClient::request(MessageType type, std::span<const std::byte> payload,
                                                  MessageType expect, std::chrono::milliseconds reply_timeout) {
  std::lock_guard lock(request_mutex_);
  if (left_) throw std::logic_error("coordinator client: used after leave()");
  send_frame(type, payload);
  Frame frame = connection_->receive(reply_timeout);
  expect_type(frame, expect, connection_->peer());
  return std::move(frame.payload);
}

std::string CoordinatorClient::local_address() const { return connection_->local_address(); }
std::string CoordinatorClient::coordinator_address() const { return connection_->peer_address(); }

void CoordinatorClient::kv_set(const std::string& key, std::string_view value) {
  const auto bytes = encode_message(KvSet{key, std::string(value)});
  const auto reply = decode_message<KvReply>(request(MessageType::kv_set, bytes, MessageType::kv_value, options_.timeout));
  if (reply.key != key) throw MessageError("coordinator answered for key " + reply.key + ", not " + key);
}

std::optional<std::string> CoordinatorClient::kv_get(const std::string& key, std::chrono::milliseconds wait) {
  wait = clamp_wait(wait);
  const auto bytes = encode_message(KvGet{key, wait.count()});
  auto reply =
      decode_message<KvReply>(request(MessageType::kv_get, bytes, MessageType::kv_value, wait + options_.timeout));
  if (reply.key != key) throw MessageError("coordinator answered for key " + reply.key + ", not " + key);
  if (!reply.found) return std::nullopt;
  return std::move(reply.value);
}

std::string CoordinatorClient::kv_wait(const std::string& key, std::chrono::milliseconds wait) {
  auto v = kv_get(key, wait);
  if (!v)
    throw std::runtime_error("coordinator: key \"" + key + "\" not set within " + format_seconds(wait) + " s");
  return std::move(*v);
}

void CoordinatorClient::send_record(std::string_view record) {
  if (left_) throw std::logic_error("coordinator client: send_record after leave()");
  send_frame(MessageType::step_record, as_bytes(record));
}

void CoordinatorClient::leave() {
  {
    std::lock_guard lock(request_mutex_);
    if (left_ || connection_->is_closed()) {
      left_ = true;
      return;
    }
  }
  stop_heartbeats();
  request(MessageType::shutdown, {}, MessageType::shutdown, options_.timeout);
  std::lock_guard lock(request_mutex_);
  left_ = true;
  connection_->close();
}

void CoordinatorClient::abandon() {
  stop_heartbeats();
  std::lock_guard lock(request_mutex_);
  left_ = true;
  connection_->close();
}

}  // namespace quartet::transport

#pragma once

// The coordinator's wire protocol, shared by coordinator.cpp (server side) and
// coordinator_client.cpp. Frames carry these cereal structs.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include "transport/messages.h"

namespace quartet::transport::coordinator_protocol {

// Coordinator protocol, after the Server's hello:
//   client: control  RegisterRole            -> server: welcome (rank) or error + close
//   client: kv_set   KvSet                   -> server: kv_value (found = true, ack)
//   client: kv_get   KvGet (waits wait_ms)   -> server: kv_value (found or not)
//   client: step_record  JSON text, no reply
//   client: heartbeat    empty, no reply
//   client: shutdown     goodbye             -> server: shutdown, then the server closes
// A client has at most one request waiting for its reply; records and heartbeats may be
// sent meanwhile.

struct RegisterRole {
  std::string arm;
  std::string role;  // empty: a connection that does not take a rank
  int32_t requested_rank = -1;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(arm, role, requested_rank);
  }
};

struct KvSet {
  std::string key;
  std::string value;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(key, value);
  }
};

struct KvGet {
  std::string key;
  int64_t wait_ms = 0;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(key, wait_ms);
  }
};

struct KvReply {
  std::string key;
  bool found = false;
  std::string value;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(key, found, value);
  }
};

inline std::span<const std::byte> as_bytes(std::string_view s) { return std::as_bytes(std::span<const char>(s)); }

inline std::string format_seconds(std::chrono::milliseconds ms) {
  const double s = static_cast<double>(ms.count()) / 1000.0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

inline constexpr auto kReplyTimeout = std::chrono::seconds(10);
// How long a client waits for the rest of a refusal's error frame once a send has
// failed; what arrived before the peer closed is read at once.
inline constexpr auto kPartingWait = std::chrono::seconds(1);
// Waits longer than a day are taken as a day (and keep time arithmetic from overflowing).
inline constexpr std::chrono::milliseconds kMaxWait = std::chrono::hours(24);

inline std::chrono::milliseconds clamp_wait(std::chrono::milliseconds w) {
  return std::clamp(w, std::chrono::milliseconds(0), kMaxWait);
}

}  // namespace quartet::transport::coordinator_protocol

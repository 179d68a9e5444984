#pragma once

// Log lines for refused connections that a flood cannot multiply. The first refusal is
// logged in full ("refused 127.0.0.1:41234: wrong token (role "client")") and opens a
// window of `interval`; refusals within the window are only counted, by peer address
// and reason, and the window ends with one summary line ("refused 1,076 connections
// from 127.0.0.1 in the last 5 s: ..."). A window that saw refusals opens the next one;
// a quiet window closes, and the next refusal is logged in full again. So N refusals
// over T seconds cost at most 2 + T / interval lines, whatever N is.
//
// Not thread-safe: the server calls it from its accept thread only (and from stop()
// once that thread has ended).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace quartet::transport {

class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;
  // Addresses named one by one in a window; refusals from further addresses are counted
  // together, so a flood from many addresses costs bounded memory.
  static constexpr size_t kMaxAddresses = 32;

  RefusalLog(Clock::duration interval, std::function<void(const std::string&)> sink);

  // One refused connection. `address`: the peer's IP, what summaries count by; `peer`:
  // address and port, for the full line; `reason`: a short fixed phrase summaries group
  // by; `detail`: what the full line says instead of the reason (empty: the reason).
  void refused(const std::string& address, const std::string& peer, const std::string& reason,
               const std::string& detail, Clock::time_point now);
  // Ends the window if it is over at `now`: logs its summary when it counted anything.
  void tick(Clock::time_point now);
  // Logs what the window counted so far, whatever the time, and closes it (shutdown).
  void flush(Clock::time_point now);
  // When the open window ends (tick then); nullopt when none is open.
  std::optional<Clock::time_point> window_end() const;

 private:
  void summarise(Clock::time_point now);

  Clock::duration interval_;
  std::function<void(const std::string&)> sink_;
  bool open_ = false;
  Clock::time_point start_{};
  int64_t counted_ = 0;
  std::map<std::string, int64_t> by_reason_;
  std::map<std::string, int64_t> by_address_;  // at most kMaxAddresses
  int64_t from_other_addresses_ = 0;
};

// 1076 -> "1,076": counts a reader takes in at a glance.
std::string grouped(int64_t n);

}  // namespace quartet::transport

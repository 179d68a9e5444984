#include "transport/refusal_log.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

namespace quartet::transport {

namespace {

// Addresses a summary names before "and N other addresses".
constexpr size_t kNamedInSummary = 3;

std::string plural(int64_t n, const std::string& one, const std::string& many) {
  return grouped(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::string grouped(int64_t n) {
  const std::string digits = std::to_string(n);
  const size_t sign = n < 0 ? 1 : 0;
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > sign && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

RefusalLog::RefusalLog(Clock::duration interval, std::function<void(const std::string&)> sink)
    : interval_(interval), sink_(std::move(sink)) {}

void RefusalLog::refused(const std::string& address, const std::string& peer, const std::string& reason,
                         const std::string& detail, Clock::time_point now) {
  tick(now);
  if (!open_) {
    open_ = true;
    start_ = now;
    sink_("refused " + peer + ": " + (detail.empty() ? reason : detail));
    return;
  }
  ++counted_;
  ++by_reason_[reason];
  if (auto it = by_address_.find(address); it != by_address_.end())
    ++it->second;
  else if (by_address_.size() < kMaxAddresses)
    by_address_.emplace(address, 1);
  else
    ++from_other_addresses_;
}

void RefusalLog::tick(Clock::time_point now) {
  if (!open_ || now < start_ + interval_) return;
  if (counted_ == 0) {
    open_ = false;  // a quiet window: the next refusal is logged in full
    return;
  }
  summarise(now);
  start_ = now;
}

void RefusalLog::flush(Clock::time_point now) {
  if (open_ && counted_ > 0) summarise(now);
  open_ = false;
}

std::optional<RefusalLog::Clock::time_point> RefusalLog::window_end() const {
  if (!open_) return std::nullopt;
  return start_ + interval_;
}

void RefusalLog::summarise(Clock::time_point now) {
  std::vector<std::pair<std::string, int64_t>> addresses(by_address_.begin(), by_address_.end());
  std::stable_sort(addresses.begin(), addresses.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string from;
  if (addresses.size() == 1 && from_other_addresses_ == 0) {
    from = addresses.front().first;
  } else {
    int64_t others = from_other_addresses_;
    size_t other_addresses = 0;
    for (size_t i = 0; i < addresses.size(); ++i) {
      if (i < kNamedInSummary) {
        from += (i == 0 ? "" : ", ") + addresses[i].first + " (" + grouped(addresses[i].second) + ")";
      } else {
        others += addresses[i].second;
        ++other_addresses;
      }
    }
    if (from_other_addresses_ > 0)
      from += " and " + grouped(others) + " from more addresses";
    else if (other_addresses > 0)
      from += " and " + grouped(others) + " from " + plural(static_cast<int64_t>(other_addresses), "other address",
                                                              "other addresses");
  }
  std::string reasons;
  for (const auto& [reason, n] : by_reason_)
    reasons += (reasons.empty() ? "" : ", ") + reason + " (" + grouped(n) + ")";
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, elapsed < 10 ? "%.2g" : "%.0f", elapsed);
  sink_("refused " + plural(counted_, "connection", "connections") + " from " + from + " in the last " + seconds +
        " s: " + reasons);
  counted_ = 0;
  by_reason_.clear();
  by_address_.clear();
  from_other_addresses_ = 0;
}

}  // namespace quartet::transport

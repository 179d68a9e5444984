#include "transport/store.h"

#include <stdexcept>

#include "transport/coordinator.h"

namespace quartet::transport {
namespace {

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

}  // namespace

MemoryStore::MemoryStore(std::chrono::milliseconds default_timeout) : default_timeout_(default_timeout) {}

void MemoryStore::set(const std::string& key, const std::vector<char>& data) {
  {
    std::lock_guard lock(mutex_);
    values_[key] = data;
  }
  cv_.notify_all();
}

std::vector<char> MemoryStore::get(const std::string& key) {
  wait({key});
  std::lock_guard lock(mutex_);
  return values_.at(key);
}

void MemoryStore::wait(const std::vector<std::string>& keys) { wait(keys, default_timeout_); }

void MemoryStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  std::unique_lock lock(mutex_);
  const bool ok = cv_.wait_for(lock, timeout, [&] {
    for (const auto& k : keys)
      if (!values_.contains(k)) return false;
    return true;
  });
  if (!ok)
    throw std::runtime_error("rendezvous store: keys not set within " + std::to_string(timeout.count()) +
                             " ms: " + join_keys(keys));
}

CoordinatorStore::CoordinatorStore(CoordinatorClient& client, std::string prefix,
                                   std::chrono::milliseconds default_timeout)
    : client_(client), prefix_(std::move(prefix)), default_timeout_(default_timeout) {}

void CoordinatorStore::set(const std::string& key, const std::vector<char>& data) {
  client_.kv_set(prefix_ + key, std::string(data.begin(), data.end()));
}

std::vector<char> CoordinatorStore::get(const std::string& key) {
  const std::string value = client_.kv_wait(prefix_ + key, default_timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void CoordinatorStore::wait(const std::vector<std::string>& keys) { wait(keys, default_timeout_); }

void CoordinatorStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& k : keys) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    client_.kv_wait(prefix_ + k, std::max(left, std::chrono::milliseconds(0)));
  }
}

}  // namespace quartet::transport

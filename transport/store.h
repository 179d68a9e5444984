#pragma once

// Rendezvous stores for Gloo: where ranks publish and find each other's addresses.
//   MemoryStore       ranks as threads of one process (tests)
//   CoordinatorStore  ranks as processes, through the run's coordinator

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace quartet::transport {

class CoordinatorClient;

// Thread-safe, in memory. wait() without a timeout waits at most `default_timeout`.
class MemoryStore final : public gloo::rendezvous::Store {
 public:
  explicit MemoryStore(std::chrono::milliseconds default_timeout = std::chrono::seconds(60));

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits for the key like wait(); throws std::runtime_error naming it on timeout.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::chrono::milliseconds default_timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<char>> values_;
};

// Keys live in the coordinator's store under `prefix` (e.g. "arm/ddp-2/gloo/"), so
// groups of one run do not collide. The client must outlive the store; calls from
// several threads are serialised by the client.
class CoordinatorStore final : public gloo::rendezvous::Store {
 public:
  CoordinatorStore(CoordinatorClient& client, std::string prefix,
                   std::chrono::milliseconds default_timeout = std::chrono::minutes(5));

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  CoordinatorClient& client_;
  std::string prefix_;
  std::chrono::milliseconds default_timeout_;
};

}  // namespace quartet::transport

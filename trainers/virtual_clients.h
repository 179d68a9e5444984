#pragma once

// What the federated and split regimes share: virtual clients hosted by pool processes
// that connect to a server publishing its address and token in the coordinator's store
// (a split client has its own connection; a federated pool one for all it trains).

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "trainers/regime.h"
#include "trainers/settings/table.h"
#include "transport/connection.h"
#include "workloads/partition.h"

namespace quartet::trainers {

// The client id of a hello role "<prefix><id>" (e.g. "fl-client/7"), or -1 for any other
// role, a negative or malformed id.
int64_t parse_client_role(const std::string& role, const std::string& prefix);

// The index p of a pool role "pool<p>", 0 <= p < processes; throws std::invalid_argument
// naming the regime's roles for anything else.
int64_t pool_index(const std::string& role, int64_t processes, const std::string& regime);

// The arm's `partition` object (kind, alpha, shards_per_client; its defaults are
// workloads::PartitionSpec's); the clients and the seed are the arm's, not fields.
const SettingsTable<workloads::PartitionSpec>& partition_table();

// The arm's partition of wl's training set among `clients` clients, seeded by the arm.
workloads::Partition client_partition(const workloads::PartitionSpec& spec, int64_t clients, uint64_t seed,
                                      const workloads::Workload& wl);

// The roles of a regime with a server and pool processes: "server", "pool0".."pool<P-1>".
std::vector<std::string> server_and_pools(int64_t processes);

// Throws SettingsError naming facts.path's processes when a pool would host no client,
// and its processes or clients when they exceed the machine's limits (a server and the
// pools are the arm's processes; every client is a thread in a pool and in the server).
void check_processes(int64_t processes, int64_t clients, const ArmFacts& facts);

// Runs `release` when it goes out of scope, however the scope ends: a server role declares
// one after its transport::Server, so that the client handlers it parks are woken before
// the server's destructor joins them.
class ReleaseOnExit {
 public:
  explicit ReleaseOnExit(std::function<void()> release) : release_(std::move(release)) {}
  ~ReleaseOnExit() { release_(); }
  ReleaseOnExit(const ReleaseOnExit&) = delete;
  ReleaseOnExit& operator=(const ReleaseOnExit&) = delete;

 private:
  std::function<void()> release_;
};

struct ServerKeys {
  std::string address;  // coordinator key holding HOST:PORT
  std::string token;    // coordinator key holding the server's token
};

// One connection's life (a split client's, a federated pool's; `who` names it in logs and
// error frames, "client 7"): join the server (retrying until join_timeout_s; the keys are
// read again after a failed attempt, as a resumed server publishes new ones), then hand
// every control frame to `serve` until the server sends shutdown or closes. A `serve` that
// throws (anything but ConnectionClosed) sends the server an error frame, and the client
// stops. Failures are logged as "<regime> <role>: <who> ...", never thrown.
// requires ctx.coordinator
void run_virtual_client(const RoleContext& ctx, const std::string& regime, const ServerKeys& keys,
                        const std::string& hello_role, const std::string& link, double join_timeout_s, const std::string& who,
                        const std::function<void(transport::Connection&, const transport::Frame&)>& serve);

}  // namespace quartet::trainers

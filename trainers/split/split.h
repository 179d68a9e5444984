#pragma once

// The split regime (docs/split.md): the model is cut at stage names; clients hold the
// data and the stages before the cut (and, U-shaped, the stages after the second cut and
// the labels), a server the rest. Activations cross the network forward and their
// gradients come back. Roles: "server" and "pool0".."pool<P-1>", the pools hosting the
// virtual clients, each with its own connection to the server.

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/model.h"
#include "trainers/regime.h"
#include "transport/connection.h"
#include "workloads/partition.h"

namespace quartet::trainers::split {

struct Settings : RegimeSettings {
  int64_t clients = 1;
  std::string variant = "vanilla";               // vanilla, ushaped, splitfed
  std::optional<std::string> cut;                // vanilla, splitfed: the client's last stage
  std::optional<std::vector<std::string>> cuts;  // ushaped: [a, b]
  std::optional<std::string> server_halves;      // splitfed: per_client (SFLv1, the default) or shared (SFLv2)
  workloads::PartitionSpec partition;            // its clients and seed are the arm's
  std::optional<int64_t> processes;  // pool processes hosting the clients; filled: 1, splitfed min(cores, clients)
  double step_timeout_s = 600.0;     // a peer silent this long in a turn is dropped
  double join_timeout_s = 300.0;     // the server waits this long for every client (not a spec field)

  static const SettingsTable<Settings>& table();
  // The cut stage names: {cut}, or the two of cuts.
  std::vector<std::string> stage_cuts() const;
  int64_t pools() const { return processes.value_or(1); }
};

const Regime& regime();

// The cost model, from the server's turn records: every turn in order (vanilla,
// U-shaped), or the clients side by side then the server (SplitFed).
CriticalPath critical_path(const std::vector<RoleRecords>& roles);

std::vector<std::string> variant_names();
std::vector<std::string> server_halves_names();

// Where each side's stages are: a cut names the last stage before it, so the client runs
// [0, lower) (up to and including the first cut's stage) and, U-shaped, [upper, n) (after
// the second cut's stage); the server runs [lower, upper). upper == n unless U-shaped.
struct Cut {
  int lower = 0;
  int upper = 0;
  int stages = 0;
  bool ushaped = false;
  std::vector<int> client_stages() const;
  std::vector<int> server_stages() const;
};

// Where the cuts of `s` fall among a model's stage names. requires settings the split
// regime has completed (Regime::parse, or a role's start), which checks the cut names
// against the model's stages with messages for the user.
Cut resolve_cut(const std::vector<std::string>& stages, const Settings& s);

// The state (parameters, then buffers) of the given stages, named as in the model's
// state_dict; the tensors are the model's own.
engine::NamedTensors stages_state(engine::Model& model, const std::vector<int>& stages);
std::vector<engine::Tensor> stages_parameters(engine::Model& model, const std::vector<int>& stages);

// Bytes and frames on one connection by what they carried ("activations", "gradients",
// "labels", "weights", "control"), measured on the connection's counters around each
// exchange, headers included. Thread-safe.
class Traffic {
 public:
  struct Count {
    int64_t sent = 0, received = 0, messages = 0;
  };
  void add(const std::string& kind, const transport::Counters& before, const transport::Counters& after);
  // Runs `fn` (one exchange on `conn`, from this thread alone) and files its bytes under `kind`.
  template <class Fn>
  auto count(transport::Connection& conn, const char* kind, Fn&& fn) {
    const transport::Counters before = conn.counters();
    if constexpr (std::is_void_v<decltype(fn())>) {
      fn();
      add(kind, before, conn.counters());
    } else {
      auto result = fn();
      add(kind, before, conn.counters());
      return result;
    }
  }
  void merge(const Traffic& other);
  std::map<std::string, Count> counts() const;
  Count total() const;
  nlohmann::json to_json() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, Count> counts_;
};

// The analytic bytes one client's turn moves, for `steps` steps of `batch` samples
// whose cut carries `cut_floats_per_sample` floats each way per sample, plus the labels
// (4 bytes each, `labels_per_sample` a sample: 1 for a class, a patch's voxels for
// segmentation, 0 when U-shaped) and the client half handed over (both ways), payload
// only: the measured counts exceed this by the framing.
int64_t analytic_turn_bytes(int64_t steps, int64_t batch, int64_t cut_floats_per_sample, int64_t labels_per_sample,
                            int64_t client_half_floats);

// The coordinator keys where the server publishes its address and token.
std::string server_address_key(const std::string& arm);
std::string server_token_key(const std::string& arm);

// requires ctx.coordinator (rendezvous), ctx.workload
void run_server(const RoleContext& ctx, const Settings& settings);
// Hosts clients c with c % processes == index, one connection each.
void run_pool(const RoleContext& ctx, const Settings& settings, int64_t index);

}  // namespace quartet::trainers::split

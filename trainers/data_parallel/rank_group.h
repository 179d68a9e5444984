#pragma once

// What the regimes whose ranks meet in collectives share (data_parallel, tensor_parallel):
// the backend checks, the rendezvous through the run's coordinator, a GPU per rank, and
// a counted sum the engine's ops call (SyncBatchNorm, Megatron's f and g).

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "trainers/data_parallel/reducer.h"
#include "trainers/metrics.h"
#include "trainers/regime.h"
#include "transport/collectives.h"
#include "transport/sub_group.h"

namespace quartet::trainers::data_parallel {

// Throws SettingsError (at facts.path + ".backend" or ".ranks") when `backend` does not
// fit the arm's device, this build or the GPUs of this host; `ranks` processes in all.
void check_backend(const std::string& backend, int64_t ranks, const ArmFacts& facts);

// The role's collectives over `backend` ("gloo", "shm", "hierarchical", "nccl"), `ranks`
// processes meeting through ctx.coordinator under the arm's name. `regime` names the
// caller in messages.
std::unique_ptr<transport::Collectives> connect(const RoleContext& ctx, const std::string& regime,
                                                const std::string& backend, int ranks);

// The role's collectives over `group` of the arm's `ranks` processes (a mesh axis's line),
// over `backend` as connect() makes them. Every member calls it with the same group.
std::unique_ptr<transport::Collectives> connect_group(const RoleContext& ctx, const std::string& regime,
                                                      const std::string& backend, int ranks,
                                                      const transport::SubGroup& group);

// On GPUs each rank has its own: the arm's device plus the rank's place on this host, its
// local rank when a cluster launcher gave one (ranks spread over hosts), else its rank.
RoleContext on_own_device(RoleContext ctx);

// Where the role keeps its checkpoint: rank 0, and every rank of an arm whose ranks hold
// the same state (`own_state` false), the arm's checkpoint file; a rank with state of its
// own (a shard, a slice) "checkpoint.<role>.safetensors" beside it.
std::filesystem::path own_checkpoint(const RoleContext& ctx, bool own_state);

// Refuses ranks that resumed from different steps (a crash between their checkpoints):
// throws std::runtime_error naming both steps.
void check_same_step(transport::Collectives& comm, int64_t step, const engine::Device& device,
                     const std::string& regime);

// Element-wise sums over the ranks, each counted in `counters`. Synchronous (what calls it
// needs the sum at once), so its time is all exposed.
class CountedSum final : public engine::StatsReducer {
 public:
  CountedSum(transport::Collectives& comm, CommCounters& counters) : comm_(comm), counters_(counters) {}
  void all_reduce_sum(engine::Tensor& t) override;
  void all_gather(const engine::Tensor& part, engine::Tensor& whole) override;
  void reduce_scatter_sum(const engine::Tensor& whole, engine::Tensor& part) override;
  double seconds = 0.0;  // spent in its collectives since the caller last reset it

 private:
  transport::Collectives& comm_;
  CommCounters& counters_;
};

// Clips to `clip_grad_norm` (engine::clip_grad_norm's rule) the gradients of a model the
// group holds in parts: `split` ones differ per rank (a slice, an expert: their squares
// are summed over the ranks by `sum`), `copies` are the same on every rank (counted once).
// Every rank calls it; undefined gradients are skipped. Returns the seconds of the sum.
double clip_by_group_norm(const std::vector<engine::Tensor>& split, const std::vector<engine::Tensor>& copies,
                          CountedSum& sum, double clip_grad_norm, const engine::Device& device);

}  // namespace quartet::trainers::data_parallel

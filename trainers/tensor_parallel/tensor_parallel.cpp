#include "trainers/tensor_parallel/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>

#include "engine/safetensors.h"
#include "trainers/data_parallel/data_parallel.h"
#include "trainers/data_parallel/rank_group.h"
#include "trainers/metrics.h"
#include "trainers/tensor_parallel/slice_hook.h"
#include "trainers/training_loop.h"
#include "workloads/models.h"

namespace quartet::trainers::tensor_parallel {
namespace {

// The step's communication: the algorithm's ring bytes and messages of its all-reduces.
nlohmann::json record(const SliceHook& hook, const Settings& s, StepRecord& r) {
  r.bytes_sent = hook.counters().bytes;
  r.bytes_received = hook.counters().bytes;
  r.messages = hook.counters().messages;
  nlohmann::json comm = step_comm_json(s.backend, hook.step_counters(), r.comm_exposed);
  comm["sequence_parallel"] = s.sequence_parallel;
  return {{"comm", comm}};
}

void train_tensor_parallel(const RoleContext& arm_ctx, const Settings& s) {
  const RoleContext ctx = data_parallel::on_own_device(arm_ctx);
  std::unique_ptr<transport::Collectives> comm =
      data_parallel::connect(ctx, "tensor_parallel", s.backend, static_cast<int>(s.ranks));
  SliceHook hook(ctx, *comm, s.sequence_parallel);
  std::shared_ptr<engine::Model> shard = workloads::make_model_shard(ctx.model_name, hook.group());
  shard->to(ctx.device);
  shard->set_checkpointing(ctx.config.checkpoint);
  hook.load(*shard);
  std::unique_ptr<engine::Optimizer> optimizer = make_optimizer(ctx.config.optimizer, shard->parameters());
  LoopOptions o;
  o.lead = ctx.rank == 0;
  o.checkpoint = data_parallel::own_checkpoint(ctx, true);  // each rank its slices
  o.checkpoint_extra = {{"ranks", s.ranks}};
  o.on_start = [&](const Position& pos) { hook.start(pos); };
  o.record_step = [&](StepRecord& r, const Position&) { return record(hook, s, r); };
  o.whole_model = [&]() -> engine::Model& { return hook.whole(); };
  if (s.sequence_parallel) {
    const std::vector<int64_t> mine = hook.positions();
    o.local_batch = [mine](const workloads::Batch& b) { return sequence_positions(b, mine); };
  }
  train_loop(ctx, *shard, *optimizer, hook, o);
}

class TensorParallel final : public RegimeOf<Settings> {
 public:
  std::string_view name() const override { return "tensor_parallel"; }
  std::string_view summary() const override {
    return "N rank processes split each block's heads and MLP (Megatron); all-reduces of activations inside "
           "forward and backward";
  }
  CriticalPath critical_path(const std::vector<RoleRecords>& roles) const override {
    return data_parallel::critical_path(roles);
  }
  std::string_view cost_model() const override {
    return "the ranks run side by side; each rank's bytes and messages are the ring all-reduces of the activations "
           "(forward) and their gradients (backward), two of each per block and micro-step, which wait for nothing "
           "else: every byte is on the critical path.";
  }

 protected:
  void complete(Settings& s, const ArmFacts& f, const nlohmann::json&) const override {
    int64_t most = 0;
    try {
      most = workloads::tensor_parallel_max_ranks(f.model);
    } catch (const std::invalid_argument& e) {
      throw SettingsError(f.path + ".model: tensor_parallel splits a transformer's blocks; " + e.what());
    }
    if (most % s.ranks != 0)
      throw SettingsError(f.path + ".ranks: " + std::to_string(s.ranks) + " ranks do not divide " + f.model + "'s " +
                          std::to_string(most) + " heads; use a divisor of " + std::to_string(most));
    const int64_t context = workloads::context_parallel_context(f.model);
    if (s.sequence_parallel && context % s.ranks != 0)
      throw SettingsError(f.path + ".sequence_parallel: " + std::to_string(s.ranks) + " ranks do not divide " +
                          f.model + "'s context of " + std::to_string(context) +
                          "; sequence parallelism gives each rank 1/ranks of it");
    data_parallel::check_backend(s.backend, s.ranks, f);
    if (f.limits)
      check_limit(f.path + ".ranks", s.ranks - static_cast<int64_t>(f.remote.size()), f.limits->processes,
                  "rank processes on this host", f.limits->basis);
  }
  std::vector<std::string> roles_of(const Settings& s) const override { return numbered_roles("rank", s.ranks); }
  void run(const RoleContext& ctx, const Settings& s) const override { train_tensor_parallel(ctx, s); }
};

}  // namespace

const SettingsTable<Settings>& Settings::table() {
  static const SettingsTable<Settings> t = [] {
    SettingsTable<Settings> t;
    t.add(&Settings::ranks, "ranks",
          "processes, each holding 1/ranks of every block's heads and MLP units; must divide the model's heads")
        .at_least(1)
        .at_most(1024)
        .needed();
    t.add(&Settings::backend, "backend",
          "collectives: \"shm\" (CPU, shared memory, every rank on one host: the NVLink of a CPU), \"gloo\" (CPU, "
          "TCP, any hosts) or \"nccl\" (GPU)")
        .allowed({"shm", "gloo", "nccl"});
    t.add(&Settings::sequence_parallel, "sequence_parallel",
          "sequence parallelism: between the split regions each rank holds 1/ranks of every sequence (its layer "
          "norms and residual adds on those positions); an all-gather and a reduce-scatter replace each "
          "all-reduce; ranks must divide the context");
    return t;
  }();
  return t;
}

const Regime& regime() {
  static const TensorParallel r;
  return r;
}

}  // namespace quartet::trainers::tensor_parallel

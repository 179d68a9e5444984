#include "trainers/expert_parallel/expert_parallel.h"

#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>

#include "engine/safetensors.h"
#include "trainers/data_parallel/data_parallel.h"
#include "trainers/data_parallel/rank_group.h"
#include "trainers/expert_parallel/expert_hook.h"
#include "trainers/metrics.h"
#include "trainers/training_loop.h"
#include "workloads/models.h"

namespace quartet::trainers::expert_parallel {
namespace {

void train_expert_parallel(const RoleContext& arm_ctx, const Settings& s) {
  const RoleContext ctx = data_parallel::on_own_device(arm_ctx);
  std::unique_ptr<transport::Collectives> comm =
      data_parallel::connect(ctx, "expert_parallel", s.backend, static_cast<int>(s.ranks));
  ExpertHook hook(ctx, {*comm, *comm, nullptr}, s.backend);
  std::shared_ptr<engine::Model> model = workloads::make_model_experts(ctx.model_name, hook.group(), hook.stats_ptr());
  model->to(ctx.device);
  model->set_checkpointing(ctx.config.checkpoint);
  hook.load(*model);
  std::unique_ptr<engine::Optimizer> optimizer = make_optimizer(ctx.config.optimizer, model->parameters());
  LoopOptions o;
  o.micro_batches = s.micro_batches;
  o.rank = ctx.rank;
  o.ranks = static_cast<int>(s.ranks);
  o.lead = ctx.rank == 0;
  o.checkpoint = data_parallel::own_checkpoint(ctx, true);  // each rank its experts
  o.checkpoint_extra = {{"ranks", s.ranks}};
  o.on_start = [&](const Position& pos) { hook.start(pos); };
  o.record_step = [&](StepRecord& r, const Position&) { return hook.record(r); };
  o.whole_model = [&]() -> engine::Model& { return hook.whole(); };
  train_loop(ctx, *model, *optimizer, hook, o);
}

class ExpertParallel final : public RegimeOf<Settings> {
 public:
  std::string_view name() const override { return "expert_parallel"; }
  std::string_view summary() const override {
    return "N rank processes hold E/N experts each and a share of every batch; tokens to their experts and back "
           "by all-to-all, the other gradients all-reduced";
  }
  CriticalPath critical_path(const std::vector<RoleRecords>& roles) const override {
    return data_parallel::critical_path(roles);
  }
  std::string_view cost_model() const override {
    return "the ranks run side by side; each rank's bytes are its all-to-alls (each MoE block's dispatch and "
           "combine, forward and backward: the rows it sends to other ranks' experts) and the ring all-reduce of "
           "the shared parameters' gradients; the all-to-alls wait for nothing else: on the critical path.";
  }

 protected:
  void complete(Settings& s, const ArmFacts& f, const nlohmann::json&) const override {
    int64_t experts = 0;
    try {
      experts = workloads::model_experts(f.model);
    } catch (const std::invalid_argument& e) {
      throw SettingsError(f.path + ".model: expert_parallel spreads a mixture of experts; " + e.what());
    }
    if (experts % s.ranks != 0)
      throw SettingsError(f.path + ".ranks: " + std::to_string(s.ranks) + " ranks do not divide " + f.model + "'s " +
                          std::to_string(experts) + " experts; use a divisor of " + std::to_string(experts));
    if (f.train.batch % (s.ranks * s.micro_batches) != 0)
      throw SettingsError(f.path + ".micro_batches: the batch " + std::to_string(f.train.batch) +
                          " does not split into " + std::to_string(s.ranks) + " ranks x " +
                          std::to_string(s.micro_batches) + " micro-batches");
    data_parallel::check_backend(s.backend, s.ranks, f);
    if (f.limits)
      check_limit(f.path + ".ranks", s.ranks - static_cast<int64_t>(f.remote.size()), f.limits->processes,
                  "rank processes on this host", f.limits->basis);
  }
  std::vector<std::string> roles_of(const Settings& s) const override { return numbered_roles("rank", s.ranks); }
  void run(const RoleContext& ctx, const Settings& s) const override { train_expert_parallel(ctx, s); }
};

}  // namespace

const SettingsTable<Settings>& Settings::table() {
  static const SettingsTable<Settings> t = [] {
    SettingsTable<Settings> t;
    t.add(&Settings::ranks, "ranks",
          "processes, each holding experts / ranks of every MoE block's experts and batch / ranks of every batch; "
          "must divide the model's experts")
        .at_least(1)
        .at_most(1024)
        .needed();
    t.add(&Settings::backend, "backend",
          "collectives: \"shm\" (CPU, shared memory, every rank on one host) or \"gloo\" (CPU, TCP, any hosts)")
        .allowed({"shm", "gloo"});
    t.add(&Settings::micro_batches, "micro_batches",
          "micro-batches per rank and step; the batch must split into ranks x micro_batches")
        .at_least(1);
    return t;
  }();
  return t;
}

const Regime& regime() {
  static const ExpertParallel r;
  return r;
}

}  // namespace quartet::trainers::expert_parallel

#include "trainers/mesh/mesh.h"

#include <memory>
#include <stdexcept>

#include "trainers/data_parallel/data_parallel.h"
#include "trainers/data_parallel/rank_group.h"
#include "trainers/data_parallel/reducer.h"
#include "trainers/tensor_parallel/slice_hook.h"
#include "trainers/training_loop.h"
#include "workloads/models.h"

namespace quartet::trainers::mesh {
namespace {

nlohmann::json axis_json(const CommCounters& c, double exposed) {
  return {{"bytes", c.bytes}, {"messages", c.messages}, {"seconds", c.seconds}, {"exposed", exposed}};
}

// The mesh's hook into the training loop: the tp line's slices (tensor_parallel's
// SliceHook over the tp group), their gradients averaged over the dp line (data_parallel's
// GradReducer over the dp group), each axis counted apart.
class MeshHook final : public Reducer {
 public:
  MeshHook(const RoleContext& ctx, const Settings& s)
      : ctx_(ctx),
        s_(s),
        at_(coordinates_of(s.mesh, ctx.rank)),
        tp_comm_(connect_axis(Axis::tp)),
        dp_comm_(connect_axis(Axis::dp)),
        slices_(ctx, *tp_comm_, false) {}

  int64_t coordinate(Axis a) const { return at_[static_cast<size_t>(a)]; }
  workloads::TensorParallelGroup tp_group() { return slices_.group(); }

  // Loads this rank's slices into `shard` and hooks its gradients into the dp reducer.
  void attach(engine::Model& shard) {
    slices_.load(shard);
    grads_ = std::make_unique<GradReducer>(shard.parameters(), *dp_comm_, dp_counters_,
                                           ReducerOptions{.bucket_bytes = static_cast<int64_t>(s_.bucket_mb * 1024 * 1024),
                                                          .zero = 0, .fp16 = false, .group_of = {}});
  }

  void start(const Position& pos) {
    if (ctx_.resume) data_parallel::check_same_step(*dp_comm_, pos.step, ctx_.device, "mesh");
    slices_.start(pos);
  }

  void begin_step() override {
    slices_.begin_step();
    dp_before_ = dp_counters_;
    dp_exposed_ = 0.0;
  }
  void prepare(bool last_micro_batch) override { grads_->prepare(last_micro_batch); }
  double inline_seconds() const override { return slices_.inline_seconds(); }
  double finish() override {
    dp_exposed_ = grads_->finish();
    return dp_exposed_ + slices_.finish();
  }
  double step(engine::Optimizer& optimizer, double clip_grad_norm) override {
    return slices_.step(optimizer, clip_grad_norm);
  }
  void gather_model() override { slices_.gather_model(); }
  void release_model() override { slices_.release_model(); }
  engine::Model& whole() { return slices_.whole(); }

  // Bytes, messages and seconds per axis; the record's totals are their sums.
  nlohmann::json record(StepRecord& r, const Position& pos) const {
    const CommCounters total = slices_.counters() + dp_counters_;
    r.bytes_sent = total.bytes;
    r.bytes_received = total.bytes;
    r.messages = total.messages;
    const CommCounters tp = slices_.step_counters(), dp = dp_counters_.since(dp_before_);
    nlohmann::json comm = step_comm_json(s_.backend, tp + dp, r.comm_exposed);
    comm["axes"] = {{"tp", axis_json(tp, tp.seconds)}, {"dp", axis_json(dp, dp_exposed_)}};
    comm["axes"]["dp"]["buckets"] = grads_->num_buckets();
    comm["mesh"] = MeshShape::table().to_json(s_.mesh);
    nlohmann::json at = nlohmann::json::object();
    for (Axis a : kAxisOrder) at[axis_name(a)] = coordinate(a);
    comm["coordinates"] = at;
    return {{"rank_samples", pos.samples / s_.mesh.dp}, {"comm", comm}};
  }

 private:
  std::unique_ptr<transport::Collectives> connect_axis(Axis axis) const {
    return data_parallel::connect_group(ctx_, "mesh", s_.backend, static_cast<int>(s_.world()),
                                        axis_group(s_.mesh, ctx_.rank, axis));
  }

  const RoleContext& ctx_;
  const Settings& s_;
  Coordinates at_;
  std::unique_ptr<transport::Collectives> tp_comm_, dp_comm_;
  tensor_parallel::SliceHook slices_;
  CommCounters dp_counters_, dp_before_;
  double dp_exposed_ = 0.0;
  std::unique_ptr<GradReducer> grads_;
};

void train_mesh(const RoleContext& arm_ctx, const Settings& s) {
  const RoleContext ctx = data_parallel::on_own_device(arm_ctx);
  MeshHook hook(ctx, s);
  std::shared_ptr<engine::Model> shard = workloads::make_model_shard(ctx.model_name, hook.tp_group());
  shard->to(ctx.device);
  shard->set_checkpointing(ctx.config.checkpoint);
  hook.attach(*shard);
  std::unique_ptr<engine::Optimizer> optimizer = make_optimizer(ctx.config.optimizer, shard->parameters());
  LoopOptions o;
  o.rank = static_cast<int>(hook.coordinate(Axis::dp));
  o.ranks = static_cast<int>(s.mesh.dp);
  o.lead = ctx.rank == 0;
  o.checkpoint = data_parallel::own_checkpoint(ctx, true);  // each rank its slices
  o.checkpoint_extra = {{"mesh", MeshShape::table().to_json(s.mesh)}};
  o.on_start = [&](const Position& pos) { hook.start(pos); };
  o.record_step = [&](StepRecord& r, const Position& pos) { return hook.record(r, pos); };
  o.whole_model = [&]() -> engine::Model& { return hook.whole(); };
  train_loop(ctx, *shard, *optimizer, hook, o);
}

// The rules of each axis against the model (docs/mesh.md): throws SettingsError naming
// the field and what it allows.
void check_axes(const Settings& s, const ArmFacts& f) {
  const MeshShape& m = s.mesh;
  const std::string at = f.path + ".mesh.";
  if (s.ranks && *s.ranks != m.ranks())
    throw SettingsError(f.path + ".ranks: " + std::to_string(*s.ranks) + " ranks, but the mesh (" + m.str() +
                        ") has " + std::to_string(m.ranks()) +
                        "; ranks must equal dp x tp x pp x cp x ep (or be left out)");
  if (m.tp > 1) {
    int64_t heads = 0;
    try {
      heads = workloads::tensor_parallel_max_ranks(f.model);
    } catch (const std::invalid_argument& e) {
      throw SettingsError(at + "tp: tp splits a transformer's blocks; " + e.what());
    }
    if (heads % m.tp != 0)
      throw SettingsError(at + "tp: " + std::to_string(m.tp) + " does not divide " + f.model + "'s " +
                          std::to_string(heads) + " heads; use a divisor of " + std::to_string(heads));
  }
  if (m.cp > 1) {
    int64_t context = 0;
    try {
      context = workloads::context_parallel_context(f.model);
    } catch (const std::invalid_argument& e) {
      throw SettingsError(at + "cp: cp splits a transformer's sequences; " + e.what());
    }
    if (context % (2 * m.cp) != 0)
      throw SettingsError(at + "cp: " + f.model + "'s context of " + std::to_string(context) +
                          " does not split into 2 x " + std::to_string(m.cp) +
                          " equal chunks; cp must be such that 2 cp divides " + std::to_string(context));
  }
  if (m.ep > 1) {
    int64_t experts = 0;
    try {
      experts = workloads::model_experts(f.model);
    } catch (const std::invalid_argument& e) {
      throw SettingsError(at + "ep: ep spreads a mixture of experts; " + e.what());
    }
    if (experts % m.ep != 0)
      throw SettingsError(at + "ep: " + std::to_string(m.ep) + " does not divide " + f.model + "'s " +
                          std::to_string(experts) + " experts; use a divisor of " + std::to_string(experts));
  }
  if (m.pp > static_cast<int64_t>(f.stages.size()))
    throw SettingsError(at + "pp: " + std::to_string(m.pp) + " pipeline stages, but " + f.model + " has " +
                        std::to_string(f.stages.size()) + " stages to share out; use at most " +
                        std::to_string(f.stages.size()));
  if (f.train.batch % m.dp != 0)
    throw SettingsError(at + "dp: the batch " + std::to_string(f.train.batch) + " does not split evenly over " +
                        std::to_string(m.dp) + " replicas; dp must divide the batch");
}

class Mesh final : public RegimeOf<Settings> {
 public:
  std::string_view name() const override { return "mesh"; }
  std::string_view summary() const override {
    return "dp x tp x pp x cp x ep rank processes on a device mesh (tp innermost), a process group per axis; "
           "this build trains dp x tp";
  }
  CriticalPath critical_path(const std::vector<RoleRecords>& roles) const override {
    return data_parallel::critical_path(roles);
  }
  std::string_view cost_model() const override {
    return "the ranks run side by side; each rank's bytes and messages are the ring algorithms' of its tp group "
           "(the activations' all-reduces, inside forward and backward) and of its dp group (the gradient "
           "buckets' all-reduces), counted per axis.";
  }

 protected:
  void complete(Settings& s, const ArmFacts& f, const nlohmann::json&) const override {
    check_axes(s, f);
    for (Axis a : {Axis::pp, Axis::cp, Axis::ep})
      if (s.mesh[a] > 1)
        throw SettingsError(f.path + ".mesh." + axis_name(a) + ": this build's mesh trains dp x tp; " +
                            axis_name(a) + " must be 1 here (the " +
                            (a == Axis::pp ? "pipeline" : a == Axis::cp ? "context_parallel" : "expert_parallel") +
                            " regime runs it alone)");
    data_parallel::check_backend(s.backend, s.world(), f);
    if (f.limits)
      check_limit(f.path + ".mesh", s.world() - static_cast<int64_t>(f.remote.size()), f.limits->processes,
                  "rank processes on this host", f.limits->basis);
  }
  std::vector<std::string> roles_of(const Settings& s) const override { return numbered_roles("rank", s.world()); }
  void run(const RoleContext& ctx, const Settings& s) const override { train_mesh(ctx, s); }
};

}  // namespace

const SettingsTable<Settings>& Settings::table() {
  static const SettingsTable<Settings> t = [] {
    SettingsTable<Settings> t;
    t.add(&Settings::mesh, "mesh",
          "the mesh's extent on each axis (omitted: 1); ranks = dp x tp x pp x cp x ep, numbered tp innermost, then "
          "cp, ep, dp, pp",
          MeshShape::table())
        .needed();
    t.add(&Settings::ranks, "ranks", "processes; when given, must equal the mesh's product").at_least(1).at_most(1024);
    t.add(&Settings::backend, "backend",
          "collectives of every axis: \"shm\" (CPU, shared memory, every rank on one host), \"gloo\" (CPU, TCP, any "
          "hosts) or \"nccl\" (GPU)")
        .allowed({"shm", "gloo", "nccl"});
    t.add(&Settings::bucket_mb, "bucket_mb", "dp's gradient bucket size in MiB, 0.001 to 4096")
        .at_least(0.001)
        .at_most(4096.0);
    return t;
  }();
  return t;
}

const Regime& regime() {
  static const Mesh r;
  return r;
}

}  // namespace quartet::trainers::mesh

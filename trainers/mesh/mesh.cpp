#include "trainers/mesh/mesh.h"

#include <utility>

#include <memory>
#include <stdexcept>

#include "engine/memory.h"
#include "trainers/context_parallel/ring.h"
#include "trainers/data_parallel/data_parallel.h"
#include "trainers/data_parallel/rank_group.h"
#include "trainers/data_parallel/reducer.h"
#include "trainers/expert_parallel/expert_hook.h"
#include "trainers/mesh/cost_model.h"
#include "trainers/mesh/pipe_step.h"
#include "trainers/tensor_parallel/slice_hook.h"
#include "trainers/training_loop.h"
#include "transport/link.h"
#include "workloads/models.h"

namespace quartet::trainers::mesh {
namespace {

nlohmann::json axis_json(const CommCounters& c, double exposed) {
  return {{"bytes", c.bytes}, {"messages", c.messages}, {"seconds", c.seconds}, {"exposed", exposed}};
}

// The model stages pipeline stage `stage` of `stages` runs: an even share of the
// model's `n` stages, in order, [stage n / stages, (stage + 1) n / stages).
std::pair<int, int> pipeline_share(int64_t stage, int64_t stages, int n) {
  return {static_cast<int>(stage * n / stages), static_cast<int>((stage + 1) * n / stages)};
}

// The mesh's hook into the training loop: the tp line's slices (tensor_parallel's
// SliceHook over the tp group), their gradients averaged over the dp line (data_parallel's
// GradReducer over the dp group), the pp line's hand-overs (PipeStep), each axis counted
// apart.
class MeshHook final : public Reducer {
 public:
  MeshHook(const RoleContext& ctx, const Settings& s)
      : ctx_(ctx),
        s_(s),
        at_(coordinates_of(s.mesh, ctx.rank)),
        tp_comm_(connect(axis_group(s.mesh, ctx.rank, Axis::tp))),
        dp_comm_(connect(axes_group(s.mesh, ctx.rank, {Axis::cp, Axis::dp}))),
        pp_comm_(connect(axis_group(s.mesh, ctx.rank, Axis::pp))),
        slices_(ctx, *tp_comm_, s.sequence_parallel) {
    if (s.mesh.cp > 1) {
      cp_comm_ = connect(axis_group(s.mesh, ctx.rank, Axis::cp));
      ring_ = std::make_unique<context_parallel::CollectivesRing>(*cp_comm_,
                                                                   workloads::context_parallel_context(ctx.model_name));
    }
    // The links to the neighbouring stages, the previous one's first (as it makes its
    // link to this one): each is made by both its members in the same order.
    const transport::SubGroup line = axis_group(s.mesh, ctx.rank, Axis::pp);
    const int64_t stage = coordinate(Axis::pp);
    auto link = [&](int64_t from) {
      return connect({"pplink/" + line.name + "/" + std::to_string(from),
                      {line.members[static_cast<size_t>(from)], line.members[static_cast<size_t>(from) + 1]}});
    };
    if (stage > 0) to_prev_ = link(stage - 1);
    if (stage + 1 < s.mesh.pp) to_next_ = link(stage);
  }

  int64_t coordinate(Axis a) const { return at_[static_cast<size_t>(a)]; }
  workloads::TensorParallelGroup tp_group() { return slices_.group(); }
  // With cp > 1, the ring of this rank's cp line; none otherwise.
  context_parallel::CollectivesRing* ring() { return ring_.get(); }

  // This rank's stages of `shard` (all of them without a pipeline) as a model of their
  // own, sharing the shard's modules; the shard is loaded with this rank's slices and,
  // with a pipeline, the other stages' parameters are freed. Hooks the stages' gradients
  // into the dp reducer.
  std::shared_ptr<engine::Model> attach(const std::shared_ptr<engine::Model>& shard) {
    slices_.load(*shard);
    const auto [lo, hi] = pipeline_share(coordinate(Axis::pp), s_.mesh.pp, shard->num_stages());
    auto mine = std::make_shared<engine::Model>();
    std::vector<std::string> held;
    for (int i = lo; i < hi; ++i) {
      const std::string& name = shard->stage_names()[static_cast<size_t>(i)];
      mine->add_stage(name, std::shared_ptr<engine::Module>(shard, &shard->stage(i)));
      held.push_back(name + ".");
    }
    mine->set_checkpointing(shard->checkpointing());
    if (s_.mesh.pp > 1)
      slices_.hold_only(
          [held](const std::string& p) {
            for (const std::string& prefix : held)
              if (p.rfind(prefix, 0) == 0) return true;
            return false;
          },
          *pp_comm_);
    grads_ = std::make_unique<GradReducer>(mine->parameters(), *dp_comm_, dp_counters_,
                                           ReducerOptions{.bucket_bytes = static_cast<int64_t>(s_.bucket_mb * 1024 * 1024),
                                                          .zero = static_cast<int>(s_.zero), .fp16 = false,
                                                          .group_of = {}});
    params_ = mine->parameters();
    if (s_.zero > 0) {
      {
        engine::MemTagScope tag(engine::MemTag::parameters);
        shard_ = engine::Tensor::zeros({grads_->shard_numel()}, ctx_.device);
      }
      shard_.set_requires_grad(true);
      if (s_.zero == 1) {
        engine::MemTagScope tag(engine::MemTag::gradients);
        shard_grad_ = engine::Tensor::zeros({grads_->shard_numel()}, ctx_.device);
      }
    }
    return mine;
  }

  // What the optimizer steps: the rank's parameters, or under ZeRO its dp shard of them.
  std::vector<engine::Tensor> stepped() const { return s_.zero == 0 ? params_ : std::vector<engine::Tensor>{shard_}; }

  // What of each micro-batch this rank computes: with sequence parallelism its tp
  // slice of every sequence, with cp its ring's chunks; none: all of it.
  LocalBatch local_batch() const {
    std::vector<int64_t> positions;
    if (s_.sequence_parallel) positions = slices_.positions();
    if (ring_) positions = ring_->positions(ring_->rank());
    if (positions.empty()) return nullptr;
    return [positions](const workloads::Batch& b) { return sequence_positions(b, positions); };
  }

  // With a pipeline, the micro-step that runs this rank's stages between its neighbours.
  PipeStep* pipe(engine::Model& stages) {
    if (s_.mesh.pp == 1) return nullptr;
    pipe_ = std::make_unique<PipeStep>(stages, *ctx_.workload, *this, *pp_comm_, to_prev_.get(), to_next_.get(),
                                       local_batch());
    return pipe_.get();
  }

  void start(const Position& pos) {
    if (ctx_.resume)
      for (transport::Collectives* c : {dp_comm_.get(), pp_comm_.get()})
        data_parallel::check_same_step(*c, pos.step, ctx_.device, "mesh");
    slices_.start(pos);
    if (s_.zero > 0) grads_->params_to_shard(shard_);
  }

  void begin_step() override {
    slices_.begin_step();
    dp_before_ = dp_counters_;
    dp_exposed_ = 0.0;
    if (pipe_) {
      pp_before_ = pipe_->counters;
      pp_seconds_before_ = pipe_->seconds();
    }
    if (ring_) {
      cp_before_ = ring_->counters;
      cp_wait_before_ = ring_->wait_seconds;
    }
  }
  void prepare(bool last_micro_batch) override { grads_->prepare(last_micro_batch); }
  double inline_seconds() const override {
    return slices_.inline_seconds() + (pipe_ ? pipe_->seconds() : 0.0) + (ring_ ? ring_->wait_seconds : 0.0);
  }
  double finish() override {
    dp_exposed_ = grads_->finish();
    return dp_exposed_ + slices_.finish();
  }
  // ZeRO (zero 1, 2) over the dp line, as data_parallel does it: the optimizer steps this
  // rank's shard (its state 1/dp of the replica's), then the shards are gathered back
  // into every parameter.
  double step(engine::Optimizer& optimizer, double clip_grad_norm) override {
    if (s_.zero == 0) return slices_.step(optimizer, clip_grad_norm);
    if (s_.zero == 1) {
      grads_->grads_to_shard(shard_grad_);
      shard_.set_grad(shard_grad_);
    } else {
      shard_.set_grad(grads_->shard_grad());
    }
    optimizer.step();
    return grads_->all_gather_params(shard_);
  }
  void gather_model() override { slices_.gather_model(); }
  void release_model() override { slices_.release_model(); }
  engine::Model& whole() { return slices_.whole(); }

  // Bytes, messages and seconds per axis; the record's totals are their sums.
  nlohmann::json record(StepRecord& r, const Position& pos) const {
    const CommCounters pp_total = pipe_ ? pipe_->counters : CommCounters{};
    const CommCounters cp_total = ring_ ? ring_->counters : CommCounters{};
    const CommCounters total = slices_.counters() + dp_counters_ + pp_total + cp_total;
    r.bytes_sent = total.bytes;
    r.bytes_received = total.bytes;
    r.messages = total.messages;
    const CommCounters tp = slices_.step_counters(), dp = dp_counters_.since(dp_before_), pp = pp_total.since(pp_before_),
                       cp = cp_total.since(cp_before_);
    nlohmann::json comm = step_comm_json(s_.backend, tp + dp + pp + cp, r.comm_exposed);
    const double pp_seconds = pipe_ ? pipe_->seconds() - pp_seconds_before_ : 0.0;
    const double cp_wait = ring_ ? ring_->wait_seconds - cp_wait_before_ : 0.0;
    comm["axes"] = {{"tp", axis_json(tp, tp.seconds)},
                    {"dp", axis_json(dp, dp_exposed_)},
                    {"pp", axis_json(pp, pp_seconds)},
                    {"cp", axis_json(cp, cp_wait)}};
    comm["axes"]["dp"]["buckets"] = grads_->num_buckets();
    comm["mesh"] = MeshShape::table().to_json(s_.mesh);
    comm["intra_link"] = s_.intra_link;
    nlohmann::json at = nlohmann::json::object();
    for (Axis a : kAxisOrder) at[axis_name(a)] = coordinate(a);
    comm["coordinates"] = at;
    return {{"rank_samples", pos.samples / s_.mesh.dp}, {"comm", comm}};
  }

 private:
  std::unique_ptr<transport::Collectives> connect(const transport::SubGroup& g) const {
    return data_parallel::connect_group(ctx_, "mesh", s_.backend, static_cast<int>(s_.world()), g);
  }

  const RoleContext& ctx_;
  const Settings& s_;
  Coordinates at_;
  std::unique_ptr<transport::Collectives> tp_comm_, dp_comm_, pp_comm_, cp_comm_, to_prev_, to_next_;
  tensor_parallel::SliceHook slices_;
  std::unique_ptr<context_parallel::CollectivesRing> ring_;
  CommCounters dp_counters_, dp_before_, pp_before_, cp_before_;
  double dp_exposed_ = 0.0, pp_seconds_before_ = 0.0, cp_wait_before_ = 0.0;
  std::unique_ptr<GradReducer> grads_;
  std::vector<engine::Tensor> params_;
  engine::Tensor shard_, shard_grad_;  // zero 1, 2: this rank's shard and (zero 1) its gradient
  std::unique_ptr<PipeStep> pipe_;
};

void train_mesh(const RoleContext& arm_ctx, const Settings& s) {
  const RoleContext ctx = data_parallel::on_own_device(arm_ctx);
  MeshHook hook(ctx, s);
  // A cp line's model runs ring attention (gpt has no ring with a tp split: cp > 1 has tp 1).
  std::shared_ptr<engine::Model> shard =
      hook.ring() ? workloads::make_context_parallel_model(ctx.model_name, ctx.config.seed, *hook.ring())
                  : workloads::make_model_shard(ctx.model_name, hook.tp_group());
  shard->to(ctx.device);
  shard->set_checkpointing(ctx.config.checkpoint);
  std::shared_ptr<engine::Model> mine = hook.attach(shard);
  std::unique_ptr<engine::Optimizer> optimizer = make_optimizer(ctx.config.optimizer, hook.stepped());
  LoopOptions o;
  o.micro_batches = s.micro_batches;
  o.rank = static_cast<int>(hook.coordinate(Axis::dp));
  o.ranks = static_cast<int>(s.mesh.dp);
  o.lead = ctx.rank == 0;
  o.checkpoint = data_parallel::own_checkpoint(ctx, true);  // each rank its slices of its stages
  o.checkpoint_extra = {{"mesh", MeshShape::table().to_json(s.mesh)}};
  o.on_start = [&](const Position& pos) { hook.start(pos); };
  o.record_step = [&](StepRecord& r, const Position& pos) { return hook.record(r, pos); };
  o.whole_model = [&]() -> engine::Model& { return hook.whole(); };
  o.micro_step = hook.pipe(*mine);
  o.local_batch = hook.local_batch();
  train_loop(ctx, *mine, *optimizer, hook, o);
}

// ep > 1 (beside dp): expert_parallel's hook with the mesh's groups: tokens exchanged
// over the ep line, the shared gradients summed over the dp x ep plane, each expert's
// over its copies on the dp line.
void train_expert_mesh(const RoleContext& arm_ctx, const Settings& s) {
  const RoleContext ctx = data_parallel::on_own_device(arm_ctx);
  auto connect = [&](const transport::SubGroup& g) {
    return data_parallel::connect_group(ctx, "mesh", s.backend, static_cast<int>(s.world()), g);
  };
  const transport::SubGroup plane = axes_group(s.mesh, ctx.rank, {Axis::ep, Axis::dp});
  std::unique_ptr<transport::Collectives> ep = connect(axis_group(s.mesh, ctx.rank, Axis::ep)),
                                          shared = connect(plane), dp = connect(axis_group(s.mesh, ctx.rank, Axis::dp));
  expert_parallel::ExpertHook hook(ctx, {*ep, *shared, dp.get()}, s.backend);
  std::shared_ptr<engine::Model> model = workloads::make_model_experts(ctx.model_name, hook.group(), hook.stats_ptr());
  model->to(ctx.device);
  model->set_checkpointing(ctx.config.checkpoint);
  hook.load(*model);
  std::unique_ptr<engine::Optimizer> optimizer = make_optimizer(ctx.config.optimizer, model->parameters());
  const Coordinates at = coordinates_of(s.mesh, ctx.rank);
  LoopOptions o;
  o.micro_batches = s.micro_batches;
  o.rank = transport::place_in(plane, ctx.rank);
  o.ranks = static_cast<int>(s.mesh.dp * s.mesh.ep);
  o.lead = ctx.rank == 0;
  o.checkpoint = data_parallel::own_checkpoint(ctx, true);  // each rank its experts
  o.checkpoint_extra = {{"mesh", MeshShape::table().to_json(s.mesh)}};
  o.on_start = [&](const Position& pos) { hook.start(pos); };
  o.record_step = [&](StepRecord& r, const Position& pos) {
    nlohmann::json out = hook.record(r);
    const CommCounters a2a = hook.step_all_to_all(), reduce = hook.step_reduce();
    nlohmann::json& comm = out["comm"];
    comm["axes"] = {{"ep", axis_json(a2a, a2a.seconds)}, {"dp", axis_json(reduce, reduce.seconds)}};
    comm["mesh"] = MeshShape::table().to_json(s.mesh);
    comm["intra_link"] = s.intra_link;
    nlohmann::json coords = nlohmann::json::object();
    for (Axis a : kAxisOrder) coords[axis_name(a)] = at[static_cast<size_t>(a)];
    comm["coordinates"] = coords;
    out["rank_samples"] = pos.samples / (s.mesh.dp * s.mesh.ep);
    return out;
  };
  o.whole_model = [&]() -> engine::Model& { return hook.whole(); };
  train_loop(ctx, *model, *optimizer, hook, o);
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
  // An axis above 1 needs the model's `what` (its heads, context, experts) to split: the
  // count, or the refusal naming the models that have one.
  auto count = [&](const char* axis, const char* needs, int64_t (*of)(const std::string&)) {
    try {
      return of(f.model);
    } catch (const std::invalid_argument& e) {
      throw SettingsError(at + axis + ": " + axis + " " + needs + "; " + e.what());
    }
  };
  if (m.tp > 1) {
    const int64_t heads = count("tp", "splits a transformer's blocks", workloads::tensor_parallel_max_ranks);
    if (heads % m.tp != 0)
      throw SettingsError(at + "tp: " + std::to_string(m.tp) + " does not divide " + f.model + "'s " +
                          std::to_string(heads) + " heads; use a divisor of " + std::to_string(heads));
  }
  if (m.cp > 1) {
    const int64_t context = count("cp", "splits a transformer's sequences", workloads::context_parallel_context);
    if (context % (2 * m.cp) != 0)
      throw SettingsError(at + "cp: " + f.model + "'s context of " + std::to_string(context) +
                          " does not split into 2 x " + std::to_string(m.cp) +
                          " equal chunks; cp must be such that 2 cp divides " + std::to_string(context));
  }
  if (m.ep > 1) {
    const int64_t experts = count("ep", "spreads a mixture of experts", workloads::model_experts);
    if (experts % m.ep != 0)
      throw SettingsError(at + "ep: " + std::to_string(m.ep) + " does not divide " + f.model + "'s " +
                          std::to_string(experts) + " experts; use a divisor of " + std::to_string(experts));
  }
  if (m.pp > static_cast<int64_t>(f.stages.size()))
    throw SettingsError(at + "pp: " + std::to_string(m.pp) + " pipeline stages, but " + f.model + " has " +
                        std::to_string(f.stages.size()) + " stages to share out; use at most " +
                        std::to_string(f.stages.size()));
  // Under ep, each rank of the dp x ep plane has its own share of the batch.
  const int64_t shares = m.dp * m.ep * s.micro_batches;
  if (f.train.batch % shares != 0)
    throw SettingsError(at + "dp: the batch " + std::to_string(f.train.batch) + " does not split evenly over " +
                        std::to_string(m.dp) + " replicas x " + std::to_string(m.ep) + " ep ranks x " +
                        std::to_string(s.micro_batches) + " micro_batches; it must be a multiple of dp x ep x "
                        "micro_batches");
  if (m.pp > 1 && f.train.clip_grad_norm > 0.0)
    throw SettingsError(f.path + ".train.clip_grad_norm: a mesh with pp > 1 does not clip (the norm spans every "
                        "stage); use 0");
}

class Mesh final : public RegimeOf<Settings> {
 public:
  std::string_view name() const override { return "mesh"; }
  std::string_view summary() const override {
    return "dp x tp x pp x cp x ep rank processes on a device mesh (tp innermost), a process group per axis; "
           "this build trains dp x tp x pp, and cp or ep beside dp";
  }
  CriticalPath critical_path(const std::vector<RoleRecords>& roles) const override {
    return mesh::critical_path(roles);
  }
  std::string_view cost_model() const override {
    return "the ranks run side by side; each rank's bytes and messages are the ring algorithms' of its tp group "
           "(the activations' all-reduces, inside forward and backward), of its dp group (the gradient buckets' "
           "all-reduces), its pp hand-overs (activations forward, their gradients back), its cp ring blocks and its ep "
           "all-to-alls, counted per axis; tp and cp, the innermost axes, within a node on the arm's intra_link, "
           "dp, pp and ep between nodes on the projected link.";
  }

 protected:
  void complete(Settings& s, const ArmFacts& f, const nlohmann::json&) const override {
    check_axes(s, f);
    if (s.mesh.ep > 1 && (s.mesh.tp > 1 || s.mesh.pp > 1 || s.mesh.cp > 1))
      throw SettingsError(f.path + ".mesh.ep: this build's mesh runs ep beside dp only (a mixture of experts has no "
                          "tensor-parallel split, and its stages and sequences are not split here); with ep " +
                          std::to_string(s.mesh.ep) + ", tp, pp and cp must be 1");
    if (s.mesh.cp > 1 && (s.mesh.tp > 1 || s.mesh.pp > 1))
      throw SettingsError(f.path + ".mesh.cp: this build's mesh runs cp beside dp only (gpt has no ring attention "
                          "within a tensor-parallel split, and pipeline stages hand on whole sequences); with cp " +
                          std::to_string(s.mesh.cp) + ", tp and pp must be 1");
    if (s.zero > 0 && s.mesh.ep > 1)
      throw SettingsError(f.path + ".zero: ZeRO shards a dp line's replicas; with ep > 1 the experts are already "
                          "spread and the mesh runs expert_parallel's reducer; use zero 0");
    if (s.sequence_parallel) {
      const int64_t context = workloads::context_parallel_context(f.model);
      if (context % s.mesh.tp != 0)
        throw SettingsError(f.path + ".sequence_parallel: tp " + std::to_string(s.mesh.tp) + " does not divide " +
                            f.model + "'s context of " + std::to_string(context) +
                            "; sequence parallelism gives each tp rank 1/tp of it");
      if (s.zero == 2)
        throw SettingsError(f.path + ".zero: zero 2 leaves no gradients in the parameters for sequence "
                            "parallelism to complete; use zero 0 or 1 with sequence_parallel");
    }
    if (s.zero > 0 && f.train.clip_grad_norm > 0.0)
      throw SettingsError(f.path + ".train.clip_grad_norm: a mesh with zero > 0 does not clip (the norm spans the "
                          "shards of every axis); use 0, or zero 0");
    if (s.mesh.ep > 1 && !f.device.is_cpu())
      throw SettingsError(f.path + ".device: a mesh with ep > 1 runs on the cpu only, as expert_parallel does; use "
                          "device \"cpu\"");
    if (s.mesh.cp > 1 && !f.device.is_cpu())
      throw SettingsError(f.path + ".device: ring attention runs on the cpu only (its blocks have no GPU kernels "
                          "yet); a mesh with cp > 1 needs device \"cpu\"");
    if (s.mesh.ep == 1) try {
      workloads::tensor_parallel_max_ranks(f.model);
    } catch (const std::invalid_argument&) {
      std::string known;
      for (const std::string& m : workloads::tensor_parallel_models()) known += (known.empty() ? "" : ", ") + m;
      throw SettingsError(f.path + ".model: this build's mesh trains the models tensor_parallel splits (" + known +
                          ") unless ep > 1; " + f.model + " is not one");
    }
    data_parallel::check_backend(s.backend, s.world(), f);
    if (f.limits)
      check_limit(f.path + ".mesh", s.world() - static_cast<int64_t>(f.remote.size()), f.limits->processes,
                  "rank processes on this host", f.limits->basis);
  }
  std::vector<std::string> roles_of(const Settings& s) const override { return numbered_roles("rank", s.world()); }
  void run(const RoleContext& ctx, const Settings& s) const override {
    if (s.mesh.ep > 1) return train_expert_mesh(ctx, s);
    train_mesh(ctx, s);
  }
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
    t.add(&Settings::sequence_parallel, "sequence_parallel",
          "sequence parallelism on the tp axis (as tensor_parallel's): between the split regions each tp rank holds "
          "1/tp of every sequence; tp must divide the context");
    t.add(&Settings::zero, "zero",
          "ZeRO over each dp line: 1 shards the optimizer state (each dp rank steps 1/dp of its replica's "
          "parameters), 2 also the gradients (reduce-scatter instead of all-reduce); the shards are gathered back "
          "after each step")
        .at_least(0)
        .at_most(2);
    t.add(&Settings::micro_batches, "micro_batches",
          "micro-batches per dp replica (and ep rank) and step, run through the pp stages one after another; the "
          "batch must split evenly over dp x ep x micro_batches")
        .at_least(1);
    t.add(&Settings::intra_link, "intra_link",
          "the link within a node that the report's projection prices the tp and cp axes' bytes at (transport/link.h "
          "presets); dp, pp and ep bytes go on each projected link")
        .allowed(transport::link_profile_names());
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

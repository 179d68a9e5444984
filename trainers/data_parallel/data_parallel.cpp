#include "trainers/data_parallel/data_parallel.h"

#include <cmath>
#include <span>
#include <stdexcept>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/safetensors.h"
#include "trainers/checkpoint.h"
#include "trainers/data_parallel/rank_group.h"
#include "trainers/data_parallel/reducer.h"
#include "trainers/data_parallel/sharded_model.h"
#include "trainers/training_loop.h"
#include "trainers/metrics.h"
#include "transport/link.h"
#include "workloads/sampler.h"

namespace quartet::trainers::data_parallel {
namespace {

using engine::MemTag;
using engine::Tensor;
using transport::CollectiveKind;

// A collective's view of a tensor: its storage on its own device (the backend matches
// the arm's device: gloo and shm the cpu's, nccl a GPU's).
std::span<float> device_span(Tensor& t) { return {t.device_data(), static_cast<size_t>(t.numel())}; }

// Every rank starts from rank 0's parameters and buffers (DDP's constructor does this).
void broadcast_state(transport::Collectives& comm, const engine::Model& model, CommCounters& counters) {
  for (auto& [name, t] : model.state_dict()) {
    Tensor v = t;
    Stopwatch clock;
    comm.broadcast(device_span(v), 0);
    counters.add(CollectiveKind::broadcast, v.numel() * 4, comm, clock.seconds());
  }
}

// Clips a sharded gradient by the global norm (engine::clip_grad_norm's rule); returns
// the seconds spent communicating.
double clip_sharded(Tensor& grad, double max_norm, transport::Collectives& comm, CommCounters& counters) {
  Tensor total = Tensor::full({1}, static_cast<float>(engine::sum_squares(grad)), grad.device());
  Stopwatch clock;
  comm.all_reduce(device_span(total));
  const double s = clock.seconds();
  counters.add(CollectiveKind::all_reduce, 4, comm, s);
  const double coef = max_norm / (std::sqrt(static_cast<double>(total.item())) + 1e-6);
  if (coef < 1.0) engine::scale_(grad, static_cast<float>(coef));
  return s;
}

// A layered backend's step per level: {"intra": {"bytes", "messages", "seconds"}, "inter": ...}.
nlohmann::json level_deltas(const std::vector<transport::LevelTotals>& now,
                            const std::vector<transport::LevelTotals>& before) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t i = 0; i < now.size() && i < before.size(); ++i)
    out[now[i].name] = {{"bytes", now[i].totals.bytes - before[i].totals.bytes},
                        {"messages", now[i].messages - before[i].messages},
                        {"seconds", now[i].totals.seconds - before[i].totals.seconds}};
  return out;
}

// data_parallel's hook into the training loop: each rank's gradients bucketed and
// all-reduced while backward runs (GradReducer), SyncBatchNorm's statistics summed over
// the ranks, and with ZeRO (zero 1, 2, 3) the optimizer stepping this rank's shard of the
// parameters, one flat tensor (SGD and Adam are element-wise, so stepping shards equals
// stepping the whole); zero 1 and 2 then gather the updated shards into every parameter,
// zero 3 gathers each stage only when it is used (ShardedModel).
class RankHook final : public Reducer {
 public:
  RankHook(const RoleContext& ctx, const Settings& s, engine::Model& model)
      : s_(s),
        comm_(connect(ctx, "data_parallel", s.backend, static_cast<int>(s.ranks))),
        sync_(*comm_, counters_),
        params_(model.parameters()),
        grads_(params_, *comm_, counters_,
               {.bucket_bytes = static_cast<int64_t>(s.bucket_mb * 1024 * 1024),
                .zero = static_cast<int>(s.zero),
                .fp16 = s.compress == "fp16",
                .group_of = s.zero == 3 ? stage_of_parameters(model) : std::vector<int>{}}) {
    if (s.sync_bn)
      model.visit([&](engine::Module& m) { m.set_stats_reducer(&sync_); });
    if (s.zero == 0) return;
    {
      engine::MemTagScope tag(MemTag::parameters);
      shard_ = Tensor::zeros({grads_.shard_numel()}, ctx.device);
    }
    shard_.set_requires_grad(true);
    if (s.zero == 1) {
      engine::MemTagScope tag(MemTag::gradients);
      shard_grad_ = Tensor::zeros({grads_.shard_numel()}, ctx.device);
    }
    if (s.zero == 3) sharded_ = std::make_unique<ShardedModel>(model, grads_, shard_);
  }

  // What the optimizer steps: the parameters, or this rank's shard of them.
  std::vector<Tensor> stepped() const { return s_.zero == 0 ? params_ : std::vector<Tensor>{shard_}; }

  // Before the first step: ranks that resumed agree on the step, then every rank starts
  // from rank 0's parameters and buffers (DDP's constructor does this).
  void start(const RoleContext& ctx, const engine::Model& model, const Position& pos) {
    if (ctx.resume) check_same_step(*comm_, pos.step, ctx.device, "data_parallel");
    broadcast_state(*comm_, model, counters_);
    if (s_.zero > 0) grads_.params_to_shard(shard_);
    release_model();
  }

  void begin_step() override {
    before_ = counters_;
    transport_before_ = comm_->stats().total().bytes;
    levels_before_ = comm_->levels();
    sync_.seconds = 0.0;
  }
  void prepare(bool last_micro_batch) override {
    grads_.prepare(last_micro_batch);
    if (sharded_) sharded_->begin_backward();
  }
  // zero 3's gathers in forward and backward wait inside them, as SyncBatchNorm's sums do.
  double inline_seconds() const override {
    return sync_.seconds + (sharded_ ? sharded_->wait_seconds() : 0.0);
  }
  double finish() override { return grads_.finish(); }

  void gather_model() override {
    if (sharded_) sharded_->gather_all();
  }
  // The gathered model is no training memory: the peaks restart from what training holds.
  void release_model() override {
    if (!sharded_) return;
    sharded_->release_all();
    engine::reset_memory_peaks();
  }

  double step(engine::Optimizer& optimizer, double clip_grad_norm) override {
    if (s_.zero == 0) return Reducer::step(optimizer, clip_grad_norm);
    double comm = 0.0;
    if (s_.zero == 1) {
      if (clip_grad_norm > 0.0) engine::clip_grad_norm(params_, clip_grad_norm);
      grads_.grads_to_shard(shard_grad_);
      shard_.set_grad(shard_grad_);
    } else {
      shard_.set_grad(grads_.shard_grad());
      if (clip_grad_norm > 0.0) comm += clip_sharded(grads_.shard_grad(), clip_grad_norm, *comm_, counters_);
    }
    optimizer.step();
    if (sharded_) {
      sharded_->release_all();  // what backward left (unused parameters' stages)
      return comm;
    }
    return comm + grads_.all_gather_params(shard_);
  }

  // The step's communication, for its record; the ring algorithms receive what they send.
  nlohmann::json record(StepRecord& r, const Position& pos) const {
    r.bytes_sent = counters_.bytes;
    r.bytes_received = counters_.bytes;
    r.messages = counters_.messages;
    const int64_t step_bytes = counters_.bytes - before_.bytes;
    const double step_seconds = counters_.seconds - before_.seconds;
    nlohmann::json out = {{"rank_samples", pos.samples / s_.ranks},
            {"comm",
             {{"backend", s_.backend},
              {"algorithmic", true},
              {"compress", s_.compress},
              {"wire", grads_.wire() == transport::Wire::f16 ? "fp16" : "fp32"},
              {"zero", s_.zero},
              {"buckets", grads_.num_buckets()},
              {"largest_bucket_bytes", grads_.largest_bucket_bytes()},
              {"bytes", step_bytes},
              // The collectives' own count of what they sent (the same convention).
              {"transport_bytes", comm_->stats().total().bytes - transport_before_},
              {"seconds", step_seconds},
              {"exposed", r.comm_exposed},
              {"busbw", step_seconds > 0.0 ? static_cast<double>(step_bytes) / step_seconds : 0.0}}}};
    if (!levels_before_.empty()) {
      out["comm"]["levels"] = level_deltas(comm_->levels(), levels_before_);
      out["comm"]["intra_link"] = s_.intra_link;
    }
    return out;
  }

 private:
  const Settings& s_;
  std::unique_ptr<transport::Collectives> comm_;
  CommCounters counters_, before_;
  int64_t transport_before_ = 0;
  std::vector<transport::LevelTotals> levels_before_;
  CountedSum sync_;
  std::vector<Tensor> params_;
  GradReducer grads_;
  Tensor shard_, shard_grad_;
  std::unique_ptr<ShardedModel> sharded_;  // zero 3
};

void train_data_parallel(const RoleContext& arm_ctx, const Settings& s) {
  const RoleContext ctx = on_own_device(arm_ctx);
  std::shared_ptr<engine::Model> model = load_initial_model(ctx);
  RankHook hook(ctx, s, *model);
  std::unique_ptr<engine::Optimizer> optimizer = make_optimizer(ctx.config.optimizer, hook.stepped());
  LoopOptions o;
  o.micro_batches = s.micro_batches;
  o.rank = ctx.rank;
  o.ranks = static_cast<int>(s.ranks);
  o.lead = ctx.rank == 0;
  // zero 0: rank 0 keeps the arm's checkpoint; sharded state: every rank its own shard.
  o.checkpoints = ctx.rank == 0 || s.zero > 0;
  o.checkpoint = own_checkpoint(ctx, s.zero > 0);  // zero > 0: a shard of its own
  o.checkpoint_extra = {{"ranks", s.ranks}, {"zero", s.zero}};
  o.on_start = [&](const Position& pos) { hook.start(ctx, *model, pos); };
  o.record_step = [&](StepRecord& r, const Position& pos) { return hook.record(r, pos); };
  train_loop(ctx, *model, *optimizer, hook, o);
}

class DataParallel final : public RegimeOf<Settings> {
 public:
  std::string_view name() const override { return "data_parallel"; }
  std::string_view summary() const override {
    return "N rank processes, B/N each, bucketed gradient all-reduce overlapped with backward";
  }
  CriticalPath critical_path(const std::vector<RoleRecords>& roles) const override {
    return data_parallel::critical_path(roles);
  }
  std::string_view cost_model() const override {
    return "the ranks run side by side; each rank's bytes and messages are the algorithm's (a ring all-reduce of S "
           "bytes over N ranks is 2(N−1) messages of S/N, one per bucket), so Gloo and NCCL traffic, which no socket "
           "counts, is projected like the rest; with backend \"hierarchical\" each level's bytes and messages are "
           "counted apart, those within a host priced at the arm's intra_link.";
  }

 protected:
  void complete(Settings& s, const ArmFacts& f, const nlohmann::json&) const override {
    check_backend(s.backend, s.ranks, f);
    const int64_t parts = s.ranks * s.micro_batches;
    if (f.train.batch % parts != 0)
      throw SettingsError(f.path + ".ranks: the batch " + std::to_string(f.train.batch) +
                          " does not split evenly over " + std::to_string(s.ranks) + " ranks x " +
                          std::to_string(s.micro_batches) +
                          " micro_batches; it must be a multiple of ranks x micro_batches (" + std::to_string(parts) +
                          ")");
    if (f.limits)
      check_limit(f.path + ".ranks", s.ranks - static_cast<int64_t>(f.remote.size()), f.limits->processes,
                  "rank processes on this host", f.limits->basis);
    if (s.backend == "hierarchical" && s.zero > 0)
      throw SettingsError(f.path + ".zero: backend \"hierarchical\" makes the all-reduce hierarchical, not ZeRO's "
                          "reduce-scatter and all-gather; use zero 0 with it, or backend \"gloo\" or \"shm\" for "
                          "zero " + std::to_string(s.zero));
  }
  // A role's rank is its place in this list.
  std::vector<std::string> roles_of(const Settings& s) const override {
    return numbered_roles("rank", s.ranks);
  }
  void run(const RoleContext& ctx, const Settings& s) const override { train_data_parallel(ctx, s); }
};

}  // namespace

const SettingsTable<Settings>& Settings::table() {
  static const SettingsTable<Settings> t = [] {
    SettingsTable<Settings> t;
    t.add(&Settings::ranks, "ranks", "processes, each batch / ranks of every batch").at_least(1).at_most(1024).needed();
    t.add(&Settings::micro_batches, "micro_batches",
          "micro-batches per rank and step, gradients communicated on the last only; the batch must split evenly "
          "over ranks x micro_batches")
        .at_least(1);
    t.add(&Settings::backend, "backend",
          "collectives: \"gloo\" (CPU, TCP, any hosts), \"shm\" (CPU, shared memory, every rank on one host), "
          "\"hierarchical\" (CPU: shared memory within each host, Gloo between one leader per host; zero 0) or "
          "\"nccl\" (GPU)")
        .allowed({"gloo", "shm", "hierarchical", "nccl"});
    t.add(&Settings::intra_link, "intra_link",
          "the link between the ranks of one host that the report's projection prices backend \"hierarchical\"'s "
          "intra-host bytes at (transport/link.h presets; its inter-host bytes go on each projected link)")
        .allowed(transport::link_profile_names())
        .applies_when("backend", {"hierarchical"});
    t.add(&Settings::bucket_mb, "bucket_mb",
          "gradient bucket size in MiB (the default is PyTorch DDP's), 0.001 (1 KiB, 256 gradients) to 4096")
        .at_least(0.001)
        .at_most(4096.0);
    t.add(&Settings::sync_bn, "sync_bn", "SyncBatchNorm: batch statistics over every rank");
    t.add(&Settings::zero, "zero",
          "ZeRO stage: 1 shards the optimizer state, 2 also the gradients, 3 also the parameters (each stage "
          "gathered for its forward and backward, as FSDP does)")
        .at_least(0)
        .at_most(3);
    t.add(&Settings::compress, "compress", "encoding of the gradients it reduces").allowed({"none", "fp16"});
    return t;
  }();
  return t;
}

const Regime& regime() {
  static const DataParallel r;
  return r;
}

std::unique_ptr<Regime> make_data_parallel() { return std::make_unique<DataParallel>(); }

}  // namespace quartet::trainers

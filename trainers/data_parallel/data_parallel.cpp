#include "trainers/data_parallel/data_parallel.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <span>
#include <stdexcept>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/safetensors.h"
#include "trainers/checkpoint.h"
#include "trainers/data_parallel/reducer.h"
#include "trainers/local_loop.h"
#include "trainers/metrics.h"
#include "transport/gloo_collectives.h"
#include "transport/shm_collectives.h"
#include "transport/store.h"
#include "workloads/sampler.h"

namespace quartet::trainers::data_parallel {
namespace {

namespace fs = std::filesystem;
using engine::MemTag;
using engine::Tensor;
using transport::CollectiveKind;

// The engine lists a module's children to its subclasses only; a pointer to that
// protected member, taken through a subclass, walks any module tree.
struct ModuleTree : engine::Module {
  static void visit(engine::Module& m, const std::function<void(engine::Module&)>& fn) {
    fn(m);
    for (const auto& [name, child] : (m.*(&ModuleTree::children))()) visit(*child, fn);
  }
};

// SyncBatchNorm: batch statistics summed over the ranks. Synchronous (forward and
// backward need the sums), so its time is all exposed.
class SyncStats final : public engine::StatsReducer {
 public:
  SyncStats(transport::Collectives& comm, CommCounters& counters) : comm_(comm), counters_(counters) {}
  void all_reduce_sum(Tensor& t) override {
    Stopwatch clock;
    comm_.all_reduce(std::span<float>(t.data(), static_cast<size_t>(t.numel())));
    const double s = clock.seconds();
    counters_.add(CollectiveKind::all_reduce, t.numel() * 4, comm_.size(), s);
    seconds += s;
  }
  double seconds = 0.0;

 private:
  transport::Collectives& comm_;
  CommCounters& counters_;
};

std::unique_ptr<transport::Collectives> connect(const RoleContext& ctx, const Settings& s) {
  if (!ctx.coordinator)
    throw std::runtime_error("data_parallel: " + ctx.role + " has no connection to the run's coordinator, which the "
                             "ranks rendezvous through");
  transport::CoordinatorStore store(*ctx.coordinator, "arm/" + ctx.arm + "/" + s.backend + "/");
  const int ranks = static_cast<int>(s.ranks);
  if (s.backend == "shm")
    return transport::make_shm_collectives(store, ctx.rank, ranks, transport::shm_options_from_environment());
  return transport::make_gloo_collectives(store, ctx.rank, ranks, transport::gloo_options_from_environment());
}

// Every rank starts from rank 0's parameters and buffers (DDP's constructor does this).
void broadcast_state(transport::Collectives& comm, const engine::Model& model, CommCounters& counters) {
  for (auto& [name, t] : model.state_dict()) {
    Tensor v = t;
    Stopwatch clock;
    comm.broadcast(std::span<float>(v.data(), static_cast<size_t>(v.numel())), 0);
    counters.add(CollectiveKind::broadcast, v.numel() * 4, comm.size(), clock.seconds());
  }
}

// Refuses ranks that resumed from different steps (a crash between their checkpoints).
void check_same_step(transport::Collectives& comm, int64_t step) {
  std::vector<float> steps(static_cast<size_t>(comm.size()));
  const float mine = static_cast<float>(step);
  comm.all_gather(std::span<const float>(&mine, 1), steps);
  for (int r = 0; r < comm.size(); ++r)
    if (steps[r] != mine)
      throw std::runtime_error("data_parallel: rank " + std::to_string(comm.rank()) + " resumes at step " +
                               std::to_string(step) + " but rank " + std::to_string(r) + " at step " +
                               std::to_string(static_cast<int64_t>(steps[r])) +
                               "; their checkpoints are of different points");
}

// Size of the record file's lines up to the record of `step` (resume keeps those).
int64_t records_bytes_through(const fs::path& path, int64_t step) {
  std::ifstream in(path, std::ios::binary);
  int64_t bytes = 0;
  std::string line;
  while (std::getline(in, line) && !in.eof()) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("step", step + 1) > step) break;
    bytes += static_cast<int64_t>(line.size()) + 1;
  }
  return bytes;
}

// zero 0 and rank 0 share the arm's checkpoint; a sharded optimizer's other ranks keep
// their own shard beside it.
fs::path own_checkpoint(const RoleContext& ctx, int64_t zero) {
  if (zero == 0 || ctx.rank == 0) return checkpoint_path(ctx.arm_dir);
  return ctx.arm_dir / ("checkpoint." + ctx.role + ".safetensors");
}

// Clips a sharded gradient by the global norm (engine::clip_grad_norm's rule); returns
// the seconds spent communicating.
double clip_sharded(Tensor& grad, double max_norm, transport::Collectives& comm, CommCounters& counters) {
  double sq = 0.0;
  const float* g = grad.data();
  for (int64_t i = 0; i < grad.numel(); ++i) sq += static_cast<double>(g[i]) * g[i];
  float total = static_cast<float>(sq);
  Stopwatch clock;
  comm.all_reduce(std::span<float>(&total, 1));
  const double s = clock.seconds();
  counters.add(CollectiveKind::all_reduce, 4, comm.size(), s);
  const double coef = max_norm / (std::sqrt(static_cast<double>(total)) + 1e-6);
  if (coef < 1.0) {
    float* p = grad.data();
    for (int64_t i = 0; i < grad.numel(); ++i) p[i] *= static_cast<float>(coef);
  }
  return s;
}

void train_data_parallel(const RoleContext& ctx, const Settings& set) {
  const TrainConfig& cfg = ctx.config;
  const workloads::Workload& wl = *ctx.workload;
  const int64_t train_size = wl.train_size();
  const LoopPlan plan = plan_loop(cfg, train_size);
  const int64_t ranks = set.ranks;
  const int64_t per_rank = cfg.batch / ranks;
  const int64_t micro = per_rank / set.micro_batches;

  std::unique_ptr<transport::Collectives> comm = connect(ctx, set);
  CommCounters counters;
  std::shared_ptr<engine::Model> model = load_initial_model(ctx);
  SyncStats sync_stats(*comm, counters);
  if (set.sync_bn)
    ModuleTree::visit(*model, [&](engine::Module& m) {
      if (auto* bn = dynamic_cast<engine::BatchNorm*>(&m)) bn->set_reducer(&sync_stats);
    });

  std::vector<Tensor> params = model->parameters();
  GradReducer reducer(params, *comm, counters,
                      {.bucket_bytes = static_cast<int64_t>(set.bucket_mb * 1024 * 1024),
                       .zero = static_cast<int>(set.zero),
                       .fp16 = set.compress == "fp16"});
  // zero 1, 2: the optimizer sees one flat tensor, this rank's shard of the parameters;
  // SGD and Adam are element-wise, so stepping shards equals stepping the whole.
  Tensor shard, shard_grad;
  std::unique_ptr<engine::Optimizer> optimizer;
  if (set.zero == 0) {
    optimizer = make_optimizer(cfg.optimizer, params);
  } else {
    {
      engine::MemTagScope tag(MemTag::parameters);
      shard = Tensor::zeros({reducer.shard_numel()});
    }
    shard.set_requires_grad(true);
    if (set.zero == 1) {
      engine::MemTagScope tag(MemTag::gradients);
      shard_grad = Tensor::zeros({reducer.shard_numel()});
    }
    optimizer = make_optimizer(cfg.optimizer, {shard});
  }
  const auto schedule = make_schedule(cfg.optimizer, cfg.schedule, cfg.batch, plan.total_steps);

  Position pos;
  const fs::path my_checkpoint = own_checkpoint(ctx, set.zero);
  if (ctx.resume) {
    if (auto p = load_checkpoint(my_checkpoint, *model, *optimizer)) pos = *p;
    check_same_step(*comm, pos.step);
  }
  broadcast_state(*comm, *model, counters);
  if (set.zero > 0) reducer.params_to_shard(shard);
  const fs::path records_file = records_path(ctx.arm_dir, ctx.role);
  JsonlWriter records(records_file.string(),
                      ctx.resume ? std::optional<int64_t>(records_bytes_through(records_file, pos.step))
                                 : std::nullopt);
  const double wall0 = pos.wall;
  Stopwatch clock;

  bool capped = false;
  for (int64_t epoch = pos.epochs_done; epoch < cfg.epochs && !capped; ++epoch) {
    const std::vector<int64_t> order = workloads::epoch_permutation(train_size, cfg.seed, epoch);
    for (int64_t b = 0; b < plan.steps_per_epoch; ++b) {
      StepRecord r;
      model->train();
      for (Tensor& p : params) p.zero_grad();
      optimizer->zero_grad();
      const CommCounters before = counters;
      sync_stats.seconds = 0.0;
      double loss_sum = 0.0;
      for (int64_t m = 0; m < set.micro_batches; ++m) {
        Stopwatch t;
        // This rank's slice of the global batch, then its m-th micro-batch.
        const auto first = order.begin() + b * cfg.batch + ctx.rank * per_rank + m * micro;
        workloads::Batch batch = wl.train_batch(std::vector<int64_t>(first, first + micro), epoch);
        r.data += t.seconds();
        reducer.prepare(m + 1 == set.micro_batches);
        double synced = sync_stats.seconds;
        t.restart();
        engine::Tensor loss = wl.loss(model->forward(batch.x), batch.y);
        r.forward += t.seconds() - (sync_stats.seconds - synced);
        synced = sync_stats.seconds;
        t.restart();
        loss_sum += loss.item();
        engine::scale(loss, 1.0f / static_cast<float>(set.micro_batches)).backward();
        r.backward += t.seconds() - (sync_stats.seconds - synced);
      }
      double exposed = reducer.finish() + sync_stats.seconds;

      Stopwatch t;
      double step_comm = 0.0;
      optimizer->set_lr(schedule->lr_at(pos.step));
      if (set.zero == 0) {
        if (cfg.clip_grad_norm > 0.0) engine::clip_grad_norm(params, cfg.clip_grad_norm);
        optimizer->step();
      } else {
        if (set.zero == 1) {
          if (cfg.clip_grad_norm > 0.0) engine::clip_grad_norm(params, cfg.clip_grad_norm);
          reducer.grads_to_shard(shard_grad);
          shard.set_grad(shard_grad);
        } else {
          shard.set_grad(reducer.shard_grad());
          if (cfg.clip_grad_norm > 0.0)
            step_comm += clip_sharded(reducer.shard_grad(), cfg.clip_grad_norm, *comm, counters);
        }
        optimizer->step();
        step_comm += reducer.all_gather_params(shard);
      }
      r.optimizer = t.seconds() - step_comm;
      exposed += step_comm;

      pos.step += 1;
      pos.samples += cfg.batch;
      r.step = pos.step;
      r.samples = pos.samples;  // the arm's samples: every rank's slices of every step
      r.epoch = static_cast<double>(pos.samples) / static_cast<double>(train_size);
      r.loss = loss_sum / static_cast<double>(set.micro_batches);  // this rank's slice
      r.lr = optimizer->lr();
      r.comm_exposed = exposed;
      r.bytes_sent = counters.bytes;
      r.bytes_received = counters.bytes;  // ring algorithms receive what they send
      r.messages = counters.messages;
      const int64_t step_bytes = counters.bytes - before.bytes;
      const double step_seconds = counters.seconds - before.seconds;
      const nlohmann::json extra = {
          {"rank_samples", pos.samples / ranks},
          {"comm",
           {{"backend", set.backend},
            {"algorithmic", true},
            {"compress", set.compress},
            {"zero", set.zero},
            {"buckets", reducer.num_buckets()},
            {"largest_bucket_bytes", reducer.largest_bucket_bytes()},
            {"bytes", step_bytes},
            {"seconds", step_seconds},
            {"exposed", exposed},
            {"busbw", step_seconds > 0.0 ? static_cast<double>(step_bytes) / step_seconds : 0.0}}}};
      capped = cfg.max_steps > 0 && pos.step >= cfg.max_steps;
      const bool epoch_end = b + 1 == plan.steps_per_epoch || capped;
      finish_step(ctx, records, r, wall0, clock, epoch_end && ctx.rank == 0, *model, extra);
      if (capped) break;
    }
    if (!capped && (ctx.rank == 0 || set.zero > 0)) {
      pos.epochs_done = epoch + 1;
      pos.wall = wall0 + clock.seconds();
      pos.records_bytes = records.bytes();
      pos.extra = {{"ranks", ranks}, {"zero", set.zero}};
      save_checkpoint(my_checkpoint, *model, *optimizer, pos);
    }
  }
  if (ctx.rank == 0) engine::save_safetensors(final_weights_path(ctx.arm_dir).string(), model->state_dict());
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
           "counts, is projected like the rest.";
  }

 protected:
  void complete(Settings& s, const ArmFacts& f, const nlohmann::json&) const override {
    if (s.backend == "nccl")
      throw SettingsError(f.path + ".backend: \"nccl\" needs CUDA GPUs and NCCL, which this build of Quartet lacks; "
                          "use \"gloo\" or \"shm\" (CPU)");
    const int64_t parts = s.ranks * s.micro_batches;
    if (f.train.batch % parts != 0)
      throw SettingsError(f.path + ".ranks: the batch " + std::to_string(f.train.batch) +
                          " does not split evenly over " + std::to_string(s.ranks) + " ranks x " +
                          std::to_string(s.micro_batches) +
                          " micro_batches; it must be a multiple of ranks x micro_batches (" + std::to_string(parts) +
                          ")");
    if (s.backend == "shm" && !f.remote.empty())
      throw SettingsError(f.path + ".remote: backend \"shm\" needs every rank on this host; ranks on other hosts "
                          "need \"gloo\"");
  }
  // A role's rank is its place in this list.
  std::vector<std::string> roles_of(const Settings& s) const override {
    std::vector<std::string> r;
    for (int64_t i = 0; i < s.ranks; ++i) r.push_back("rank" + std::to_string(i));
    return r;
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
          "collectives: \"gloo\" (CPU, TCP, any hosts), \"shm\" (CPU, shared memory, every rank on one host) or "
          "\"nccl\" (GPU)")
        .allowed({"gloo", "shm", "nccl"});
    t.add(&Settings::bucket_mb, "bucket_mb", "gradient bucket size in MiB (the default is PyTorch DDP's)").above(0.0);
    t.add(&Settings::sync_bn, "sync_bn", "SyncBatchNorm: batch statistics over every rank");
    t.add(&Settings::zero, "zero", "ZeRO stage: 1 shards the optimizer state, 2 also the gradients")
        .at_least(0)
        .at_most(2);
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

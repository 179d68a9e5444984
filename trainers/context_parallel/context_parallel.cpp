#include "trainers/context_parallel/context_parallel.h"

#include <memory>
#include <span>
#include <stdexcept>

#include "engine/ops.h"
#include "engine/safetensors.h"
#include "trainers/data_parallel/data_parallel.h"
#include "trainers/data_parallel/rank_group.h"
#include "trainers/data_parallel/reducer.h"
#include "trainers/metrics.h"
#include "trainers/context_parallel/ring.h"
#include "trainers/training_loop.h"
#include "workloads/models.h"

namespace quartet::trainers::context_parallel {
namespace {

using engine::Tensor;
using transport::CollectiveKind;

constexpr double kBucketMb = 25.0;  // PyTorch DDP's, as data_parallel's default

// context_parallel's hook into the training loop: the ring attention's shifts run inside
// forward and backward (their waits are inline communication); the gradients are
// averaged over the ranks by data_parallel's bucketed all-reduce, launched as backward
// finishes them. Rank 0 evaluates and writes a whole model, its own parameters copied into
// one of the plain model.
class RingHook final : public Reducer {
 public:
  RingHook(const RoleContext& ctx, const Settings& s)
      : ctx_(ctx),
        s_(s),
        comm_(data_parallel::connect(ctx, "context_parallel", s.backend, static_cast<int>(s.ranks))),
        ring_(*comm_, workloads::context_parallel_context(ctx.model_name)) {}

  engine::AttentionRing& ring() { return ring_; }
  const std::vector<int64_t>& positions() const { return ring_.positions(ring_.rank()); }

  void attach(engine::Model& model) {
    model_ = &model;
    ReducerOptions options;
    options.bucket_bytes = static_cast<int64_t>(kBucketMb * 1024 * 1024);
    grads_ = std::make_unique<GradReducer>(model.parameters(), *comm_, grad_counters_, options);
  }

  void start(const Position& pos) {
    if (ctx_.resume) data_parallel::check_same_step(*comm_, pos.step, ctx_.device, "context_parallel");
    engine::reset_memory_peaks();
  }

  void begin_step() override {
    ring_before_ = ring_.counters;
    grad_before_ = grad_counters_;
    wait_before_ = ring_.wait_seconds;
  }
  void prepare(bool last_micro_batch) override { grads_->prepare(last_micro_batch); }
  double inline_seconds() const override { return ring_.wait_seconds; }
  double finish() override { return grads_->finish(); }

  void gather_model() override {
    if (ctx_.rank != 0) return;
    if (!whole_) whole_ = make_model(ctx_);
    engine::load_state_dict(*whole_, model_->state_dict());
  }
  void release_model() override {
    whole_.reset();
    engine::reset_memory_peaks();
  }
  engine::Model& whole() { return *whole_; }

  // The step's communication: the ring's blocks (send_recv) and the gradients'
  // all-reduces, each as its algorithm moves them; every rank receives what it sends.
  nlohmann::json record(StepRecord& r) const {
    const CommCounters& ring = ring_.counters;
    r.bytes_sent = ring.bytes + grad_counters_.bytes;
    r.bytes_received = r.bytes_sent;
    r.messages = ring.messages + grad_counters_.messages;
    const CommCounters ring_step = ring.since(ring_before_), grad_step = grad_counters_.since(grad_before_);
    nlohmann::json comm = step_comm_json(s_.backend, ring_step + grad_step, r.comm_exposed);
    comm["ring_bytes"] = ring_step.bytes;
    comm["ring_messages"] = ring_step.messages;
    comm["ring_wait"] = ring_.wait_seconds - wait_before_;
    comm["gradient_bytes"] = grad_step.bytes;
    comm["buckets"] = grads_->num_buckets();
    return {{"comm", comm}};
  }

 private:
  const RoleContext& ctx_;
  const Settings& s_;
  std::unique_ptr<transport::Collectives> comm_;
  CollectivesRing ring_;
  CommCounters grad_counters_, ring_before_, grad_before_;
  double wait_before_ = 0.0;
  std::unique_ptr<GradReducer> grads_;
  engine::Model* model_ = nullptr;
  std::shared_ptr<engine::Model> whole_;  // rank 0, between gather_model and release_model
};

void train_context_parallel(const RoleContext& ctx, const Settings& s) {
  RingHook hook(ctx, s);
  std::shared_ptr<engine::Model> model =
      workloads::make_context_parallel_model(ctx.model_name, ctx.config.seed, hook.ring());
  model->to(ctx.device);
  model->set_checkpointing(ctx.config.checkpoint);
  engine::load_state_dict(*model, engine::read_safetensors(ctx.init_weights.string()).tensors);
  hook.attach(*model);
  std::unique_ptr<engine::Optimizer> optimizer = make_optimizer(ctx.config.optimizer, model->parameters());
  LoopOptions o;
  o.lead = ctx.rank == 0;
  // Every rank holds the same parameters and optimizer state: rank 0 keeps the arm's
  // checkpoint and every rank resumes from it.
  o.checkpoints = ctx.rank == 0;
  o.checkpoint = data_parallel::own_checkpoint(ctx, false);
  o.checkpoint_extra = {{"ranks", s.ranks}};
  o.on_start = [&](const Position& pos) { hook.start(pos); };
  o.record_step = [&](StepRecord& r, const Position&) { return hook.record(r); };
  o.whole_model = [&]() -> engine::Model& { return hook.whole(); };
  o.local_batch = [&](const workloads::Batch& b) { return sequence_positions(b, hook.positions()); };
  train_loop(ctx, *model, *optimizer, hook, o);
}

class ContextParallel final : public RegimeOf<Settings> {
 public:
  std::string_view name() const override { return "context_parallel"; }
  std::string_view summary() const override {
    return "N rank processes split every sequence (load-balanced causal chunks); ring attention passes key/value "
           "blocks rank to rank; gradients all-reduced";
  }
  CriticalPath critical_path(const std::vector<RoleRecords>& roles) const override {
    return data_parallel::critical_path(roles);
  }
  std::string_view cost_model() const override {
    return "the ranks run side by side; each rank's bytes and messages are its ring attention's point-to-point "
           "blocks (keys and values forward, again with their gradients backward: (3N-2) blocks of 2 B (T/N) W "
           "floats per layer) and the ring all-reduce of the gradients, every byte on the critical path.";
  }

 protected:
  void complete(Settings& s, const ArmFacts& f, const nlohmann::json&) const override {
    int64_t context = 0;
    try {
      context = workloads::context_parallel_context(f.model);
    } catch (const std::invalid_argument& e) {
      throw SettingsError(f.path + ".model: context_parallel splits a transformer's sequences; " + e.what());
    }
    if (context % (2 * s.ranks) != 0)
      throw SettingsError(f.path + ".ranks: " + std::to_string(s.ranks) + " ranks cut " + f.model + "'s context of " +
                          std::to_string(context) + " into 2 x ranks = " + std::to_string(2 * s.ranks) +
                          " chunks, which do not divide it; use ranks whose double divides " + std::to_string(context));
    if (!f.device.is_cpu())
      throw SettingsError(f.path + ".device: context_parallel's ring attention runs on the cpu only (its blocks have "
                          "no GPU kernels yet); use device \"cpu\"");
    data_parallel::check_backend(s.backend, s.ranks, f);
    if (f.limits)
      check_limit(f.path + ".ranks", s.ranks - static_cast<int64_t>(f.remote.size()), f.limits->processes,
                  "rank processes on this host", f.limits->basis);
  }
  std::vector<std::string> roles_of(const Settings& s) const override { return numbered_roles("rank", s.ranks); }
  void run(const RoleContext& ctx, const Settings& s) const override { train_context_parallel(ctx, s); }
};

}  // namespace

const SettingsTable<Settings>& Settings::table() {
  static const SettingsTable<Settings> t = [] {
    SettingsTable<Settings> t;
    t.add(&Settings::ranks, "ranks",
          "processes, each holding 2 of the 2 x ranks chunks of every sequence (chunks r and 2 x ranks - 1 - r); "
          "2 x ranks must divide the model's context")
        .at_least(1)
        .at_most(1024)
        .needed();
    t.add(&Settings::backend, "backend",
          "collectives: \"shm\" (CPU, shared memory, every rank on one host) or \"gloo\" (CPU, TCP, any hosts)")
        .allowed({"shm", "gloo"});
    return t;
  }();
  return t;
}

const Regime& regime() {
  static const ContextParallel r;
  return r;
}

}  // namespace quartet::trainers::context_parallel

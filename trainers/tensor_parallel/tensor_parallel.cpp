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
#include "trainers/training_loop.h"
#include "workloads/models.h"

namespace quartet::trainers::tensor_parallel {
namespace {

using engine::Tensor;
using workloads::TensorSplit;

// Where rank `rank` of `size` finds its part of a whole parameter of `shape` (rows:
// a slice of dim 0; columns: of dim 1, in every row) as (offset, count) runs of the
// whole's values, in the slice's order. None for a part the rank does not hold.
std::vector<std::pair<int64_t, int64_t>> slice_runs(const engine::Shape& shape, TensorSplit split, int rank,
                                                    int size) {
  const int64_t numel = engine::shape_numel(shape);
  switch (split) {
    case TensorSplit::whole:
      return {{0, numel}};
    case TensorSplit::first_rank:
      return rank == 0 ? std::vector<std::pair<int64_t, int64_t>>{{0, numel}} : std::vector<std::pair<int64_t, int64_t>>{};
    case TensorSplit::rows: {
      const int64_t part = numel / size;
      return {{rank * part, part}};
    }
    case TensorSplit::columns: {
      const int64_t cols = shape.at(1), row = numel / shape.at(0), part = cols / size;
      std::vector<std::pair<int64_t, int64_t>> runs;
      for (int64_t r = 0; r < shape.at(0); ++r) runs.emplace_back(r * row + rank * part, part);
      return runs;
    }
  }
  return {};
}

// A parameter of the whole model and how the group holds it.
struct Part {
  std::string name;
  TensorSplit split;
  engine::Shape whole_shape;
  Tensor slice;  // this rank's; undefined where it holds none
};

// The hook tensor parallelism takes into the training loop: its all-reduces run inside
// forward and backward (Megatron's f and g), so there is nothing to finish after
// backward; it counts them for the records, and gathers the whole model on rank 0 from
// every rank's slices where the loop evaluates and saves.
class SliceHook final : public Reducer {
 public:
  SliceHook(const RoleContext& ctx, const Settings& s)
      : ctx_(ctx),
        s_(s),
        comm_(data_parallel::connect(ctx, "tensor_parallel", s.backend, static_cast<int>(s.ranks))),
        sum_(*comm_, counters_),
        gather_sum_(*comm_, gather_counters_) {}

  workloads::TensorParallelGroup group() {
    return {ctx_.rank, static_cast<int>(s_.ranks), &sum_, s_.sequence_parallel};
  }

  // Sequence parallel: this rank's contiguous slice of every sequence.
  std::vector<int64_t> positions() const {
    const int64_t t = workloads::context_parallel_context(ctx_.model_name), slice = t / s_.ranks;
    std::vector<int64_t> out;
    for (int64_t p = ctx_.rank * slice; p < (ctx_.rank + 1) * slice; ++p) out.push_back(p);
    return out;
  }

  // Sequence parallel: each rank's backward seeded its own tokens' mean loss, and the
  // reduce-scatters and all-gathers summed those over the ranks into every split
  // parameter's gradient: N times the mean loss's. A whole parameter got only its own
  // tokens' part, the ranks' parts summed here. Both are scaled by 1/N.
  double finish() override {
    if (!s_.sequence_parallel) return 0.0;
    const float mean = 1.0f / static_cast<float>(s_.ranks);
    for (Part& p : parts_) {
      if (!p.slice.defined() || !p.slice.grad().defined()) continue;
      Tensor g = p.slice.grad();
      if (p.split == TensorSplit::whole) sum_.all_reduce_sum(g);
      engine::scale_(g, mean);
    }
    return 0.0;  // its sums' time is in inline_seconds()
  }

  // Loads this rank's slices of the whole model's initial weights into `shard`.
  void load(engine::Model& shard) {
    const engine::SafetensorsFile init = engine::read_safetensors(ctx_.init_weights.string());
    std::map<std::string, Tensor> whole(init.tensors.begin(), init.tensors.end());
    std::map<std::string, Tensor> mine;
    for (auto& [name, t] : shard.named_parameters()) mine[name] = t;
    for (const auto& [name, split] : workloads::tensor_parallel_plan(ctx_.model_name)) {
      const auto w = whole.find(name);
      if (w == whole.end()) throw std::runtime_error("tensor_parallel: the initial weights lack " + name);
      Part p{name, split, w->second.shape(), {}};
      const auto runs = slice_runs(p.whole_shape, split, ctx_.rank, static_cast<int>(s_.ranks));
      if (!runs.empty()) {
        p.slice = mine.at(name);
        const std::vector<float> values = w->second.to_vector();
        std::vector<float> part;
        for (const auto& [offset, count] : runs) part.insert(part.end(), values.begin() + offset, values.begin() + offset + count);
        p.slice.copy_from_host(part);
      }
      parts_.push_back(std::move(p));
    }
  }

  void start(const Position& pos) {
    if (ctx_.resume) data_parallel::check_same_step(*comm_, pos.step, ctx_.device, "tensor_parallel");
    engine::reset_memory_peaks();
  }

  void begin_step() override {
    before_ = counters_;
    sum_.seconds = 0.0;
  }
  double inline_seconds() const override { return sum_.seconds; }

  // Clips by the whole model's gradient norm (engine::clip_grad_norm's rule): the split
  // parameters' squares summed over the ranks, rank 0's first_rank biases once, and the
  // copies every rank holds once.
  double step(engine::Optimizer& optimizer, double clip_grad_norm) override {
    double comm = 0.0;
    if (clip_grad_norm > 0.0) {
      std::vector<Tensor> split, copies;
      for (const Part& p : parts_)
        if (p.slice.defined()) (p.split == TensorSplit::whole ? copies : split).push_back(p.slice.grad());
      comm = data_parallel::clip_by_group_norm(split, copies, sum_, clip_grad_norm, ctx_.device);
    }
    optimizer.step();
    return comm;
  }

  // Every rank sums the split parameters' slices, placed in zeros, into the whole; rank
  // 0 keeps them, with its own copies of the rest, in a whole model it builds here.
  void gather_model() override {
    if (ctx_.rank == 0 && !whole_) whole_ = make_model(ctx_);
    std::map<std::string, Tensor> target;
    if (whole_)
      for (auto& [name, t] : whole_->named_parameters()) target[name] = t;
    for (Part& p : parts_) {
      if (p.split == TensorSplit::whole || p.split == TensorSplit::first_rank) {
        if (whole_) target.at(p.name).copy_from(p.slice);
        continue;
      }
      Tensor buf = Tensor::zeros(p.whole_shape, ctx_.device);
      const std::vector<float> mine = p.slice.to_vector();
      update_on_host(buf, [&](std::span<float> v) {
        size_t at = 0;
        for (const auto& [offset, count] : slice_runs(p.whole_shape, p.split, ctx_.rank, static_cast<int>(s_.ranks))) {
          std::copy_n(mine.begin() + static_cast<std::ptrdiff_t>(at), count, v.begin() + offset);
          at += static_cast<size_t>(count);
        }
      });
      gather_sum_.all_reduce_sum(buf);
      if (whole_) target.at(p.name).copy_from(buf);
    }
  }
  void release_model() override {
    whole_.reset();
    engine::reset_memory_peaks();
  }
  engine::Model& whole() { return *whole_; }

  // The step's communication: the algorithm's ring bytes and messages of its all-reduces.
  nlohmann::json record(StepRecord& r) const {
    r.bytes_sent = counters_.bytes;
    r.bytes_received = counters_.bytes;
    r.messages = counters_.messages;
    nlohmann::json comm = step_comm_json(s_.backend, counters_.since(before_), r.comm_exposed);
    comm["sequence_parallel"] = s_.sequence_parallel;
    return {{"comm", comm}};
  }

 private:
  const RoleContext& ctx_;
  const Settings& s_;
  std::unique_ptr<transport::Collectives> comm_;
  CommCounters counters_, before_, gather_counters_;
  data_parallel::CountedSum sum_, gather_sum_;
  std::vector<Part> parts_;
  std::shared_ptr<engine::Model> whole_;  // rank 0, between gather_model and release_model
};

void train_tensor_parallel(const RoleContext& arm_ctx, const Settings& s) {
  const RoleContext ctx = data_parallel::on_own_device(arm_ctx);
  SliceHook hook(ctx, s);
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
  o.record_step = [&](StepRecord& r, const Position&) { return hook.record(r); };
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

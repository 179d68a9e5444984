#include "trainers/expert_parallel/expert_parallel.h"

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

namespace quartet::trainers::expert_parallel {
namespace {

using engine::Tensor;

bool is_expert(const std::string& name) { return name.find(".experts.") != std::string::npos; }

// The group's all-to-all, each call counted: what this rank sends to the others
// (transport::all_to_all_sent_bytes), N-1 messages.
class CountedExchanger final : public engine::RowExchanger {
 public:
  CountedExchanger(transport::Collectives& comm, CommCounters& counters) : comm_(comm), counters_(counters) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void all_to_all(const std::vector<float>& in, const std::vector<int64_t>& send, std::vector<float>& out,
                  const std::vector<int64_t>& recv) override {
    Stopwatch clock;
    comm_.all_to_all(in, send, out, recv);
    const double s = clock.seconds();
    counters_.bytes += transport::all_to_all_sent_bytes(send, comm_.rank());
    counters_.messages += transport::algorithmic_messages(transport::CollectiveKind::all_to_all, comm_.size());
    counters_.seconds += s;
    seconds += s;
  }
  double seconds = 0.0;  // since the caller last reset it

 private:
  transport::Collectives& comm_;
  CommCounters& counters_;
};

// A parameter of the whole model: its name, shape, and this rank's tensor (undefined for
// another rank's expert).
struct Part {
  std::string name;
  engine::Shape shape;
  Tensor mine;
};

class ExpertHook final : public Reducer {
 public:
  ExpertHook(const RoleContext& ctx, const Settings& s)
      : ctx_(ctx),
        s_(s),
        comm_(data_parallel::connect(ctx, "expert_parallel", s.backend, static_cast<int>(s.ranks))),
        exchange_(*comm_, a2a_),
        sum_(*comm_, reduce_),
        gather_sum_(*comm_, gather_counters_) {}

  workloads::ExpertGroup group() { return {&exchange_}; }
  workloads::MoeStats& stats() { return *stats_; }
  std::shared_ptr<workloads::MoeStats> stats_ptr() { return stats_; }

  // Loads the whole model's initial weights into this rank's parameters by name.
  void load(engine::Model& model) {
    const engine::SafetensorsFile init = engine::read_safetensors(ctx_.init_weights.string());
    std::map<std::string, Tensor> mine;
    for (auto& [name, t] : model.named_parameters()) mine[name] = t;
    for (const auto& [name, t] : init.tensors) {
      const auto m = mine.find(name);
      Part p{name, t.shape(), m == mine.end() ? Tensor() : m->second};
      if (p.mine.defined()) p.mine.copy_from(t.to(p.mine.device()));
      else if (!is_expert(name)) throw std::runtime_error("expert_parallel: the model lacks " + name);
      parts_.push_back(std::move(p));
    }
  }

  void start(const Position& pos) {
    if (ctx_.resume) data_parallel::check_same_step(*comm_, pos.step, ctx_.device, "expert_parallel");
    engine::reset_memory_peaks();
  }

  void begin_step() override {
    before_a2a_ = a2a_;
    before_reduce_ = reduce_;
    exchange_.seconds = 0.0;
    stats_->reset();
  }
  double inline_seconds() const override { return exchange_.seconds; }

  // The shared parameters' gradients summed over the ranks in one buffer; every gradient
  // then divided by N: each rank's loss is the mean over its share of the batch, so the
  // sum over ranks (an expert's gradient already is one) is N times the batch mean's.
  double finish() override {
    const float inv = 1.0f / static_cast<float>(s_.ranks);
    int64_t total = 0;
    for (const Part& p : parts_)
      if (!is_expert(p.name)) total += engine::shape_numel(p.shape);
    Tensor flat = Tensor::empty({total}, ctx_.device);
    int64_t at = 0;
    for (const Part& p : parts_) {
      if (is_expert(p.name)) continue;
      engine::copy_range(flat, at, p.mine.grad(), 0, p.mine.numel());
      at += p.mine.numel();
    }
    Stopwatch clock;
    sum_.all_reduce_sum(flat);
    const double waited = clock.seconds();
    engine::scale_(flat, inv);
    at = 0;
    for (Part& p : parts_) {
      if (!p.mine.defined()) continue;
      Tensor g = p.mine.grad();
      if (is_expert(p.name)) {
        engine::scale_(g, inv);
        continue;
      }
      engine::copy_range(g, 0, flat, at, p.mine.numel());
      at += p.mine.numel();
    }
    return waited;
  }

  // Clips by the whole model's gradient norm: the shared gradients (equal on every rank)
  // once, each expert's from its owner.
  double step(engine::Optimizer& optimizer, double clip_grad_norm) override {
    double comm = 0.0;
    if (clip_grad_norm > 0.0) {
      std::vector<Tensor> experts, shared;
      for (const Part& p : parts_)
        if (p.mine.defined()) (is_expert(p.name) ? experts : shared).push_back(p.mine.grad());
      comm = data_parallel::clip_by_group_norm(experts, shared, sum_, clip_grad_norm, ctx_.device);
    }
    optimizer.step();
    return comm;
  }

  // Every expert summed into zeros from its owner; rank 0 keeps the whole model.
  void gather_model() override {
    if (ctx_.rank == 0 && !whole_) whole_ = make_model(ctx_);
    std::map<std::string, Tensor> target;
    if (whole_)
      for (auto& [name, t] : whole_->named_parameters()) target[name] = t;
    for (const Part& p : parts_) {
      if (!is_expert(p.name)) {
        if (whole_) target.at(p.name).copy_from(p.mine);
        continue;
      }
      Tensor buf = p.mine.defined() ? p.mine.detach().clone() : Tensor::zeros(p.shape, ctx_.device);
      gather_sum_.all_reduce_sum(buf);
      if (whole_) target.at(p.name).copy_from(buf);
    }
  }
  void release_model() override {
    whole_.reset();
    engine::reset_memory_peaks();
  }
  engine::Model& whole() { return *whole_; }

  // The step's communication (the all-to-alls and the gradients' all-reduce) and this
  // rank's routing: choices made, dropped, and taken by each expert.
  nlohmann::json record(StepRecord& r) const {
    r.bytes_sent = a2a_.bytes + reduce_.bytes;
    r.bytes_received = r.bytes_sent;
    r.messages = a2a_.messages + reduce_.messages;
    const CommCounters a2a = a2a_.since(before_a2a_), reduce = reduce_.since(before_reduce_);
    nlohmann::json comm = step_comm_json(s_.backend, a2a + reduce, r.comm_exposed);
    comm["all_to_all_bytes"] = a2a.bytes;
    comm["all_reduce_bytes"] = reduce.bytes;
    return {{"comm", comm},
            {"moe", {{"choices", stats_->choices}, {"dropped", stats_->dropped}, {"load", stats_->load}}}};
  }

 private:
  const RoleContext& ctx_;
  const Settings& s_;
  std::unique_ptr<transport::Collectives> comm_;
  CommCounters a2a_, before_a2a_, reduce_, before_reduce_, gather_counters_;
  CountedExchanger exchange_;
  data_parallel::CountedSum sum_, gather_sum_;
  std::shared_ptr<workloads::MoeStats> stats_ = std::make_shared<workloads::MoeStats>();
  std::vector<Part> parts_;
  std::shared_ptr<engine::Model> whole_;  // rank 0, between gather_model and release_model
};

void train_expert_parallel(const RoleContext& arm_ctx, const Settings& s) {
  const RoleContext ctx = data_parallel::on_own_device(arm_ctx);
  ExpertHook hook(ctx, s);
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

#pragma once

// Expert parallelism's part in the training loop over the groups it talks in (the whole
// arm under expert_parallel; an ep line, a dp x ep plane and a dp line on a mesh).

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/safetensors.h"
#include "trainers/data_parallel/rank_group.h"
#include "trainers/metrics.h"
#include "trainers/training_loop.h"
#include "workloads/models.h"

namespace quartet::trainers::expert_parallel {

inline bool is_expert(const std::string& name) { return name.find(".experts.") != std::string::npos; }

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
  engine::Tensor mine;
};

// The groups an expert-parallel rank talks in. Under expert_parallel all three are the
// arm's ranks; on a mesh, exchange is the ep line, shared the dp x ep plane, and experts
// the dp line (the ranks holding copies of this rank's experts).
struct ExpertGroups {
  transport::Collectives& exchange;  // tokens to their experts and back (all-to-all)
  transport::Collectives& shared;    // every rank with its own share of the batch
  transport::Collectives* experts;   // copies of this rank's experts; none: it holds the only one
};

// expert_parallel's hook into the training loop: the all-to-alls inside forward and
// backward (counted), the shared parameters' gradients summed over `shared` and every
// gradient turned into the batch mean's, clipping by the whole model's norm, and the
// whole model gathered on the arm's rank 0 from the experts' owners.
class ExpertHook final : public Reducer {
 public:
  ExpertHook(const RoleContext& ctx, ExpertGroups groups, std::string backend)
      : ctx_(ctx),
        groups_(groups),
        backend_(std::move(backend)),
        exchange_(groups.exchange, a2a_),
        sum_(groups.exchange, reduce_),
        shared_sum_(groups.shared, reduce_),
        gather_sum_(groups.exchange, gather_counters_) {}

  workloads::ExpertGroup group() { return {&exchange_}; }
  workloads::MoeStats& stats() { return *stats_; }
  std::shared_ptr<workloads::MoeStats> stats_ptr() { return stats_; }

  // Loads the whole model's initial weights into this rank's parameters by name.
  void load(engine::Model& model) {
    const engine::SafetensorsFile init = engine::read_safetensors(ctx_.init_weights.string());
    std::map<std::string, engine::Tensor> mine;
    for (auto& [name, t] : model.named_parameters()) mine[name] = t;
    for (const auto& [name, t] : init.tensors) {
      const auto m = mine.find(name);
      Part p{name, t.shape(), m == mine.end() ? engine::Tensor() : m->second};
      if (p.mine.defined()) p.mine.copy_from(t.to(p.mine.device()));
      else if (!is_expert(name)) throw std::runtime_error("expert_parallel: the model lacks " + name);
      parts_.push_back(std::move(p));
    }
  }

  void start(const Position& pos) {
    if (ctx_.resume) data_parallel::check_same_step(groups_.shared, pos.step, ctx_.device, "expert_parallel");
    engine::reset_memory_peaks();
  }

  void begin_step() override {
    before_a2a_ = a2a_;
    before_reduce_ = reduce_;
    exchange_.seconds = 0.0;
    stats_->reset();
  }
  double inline_seconds() const override { return exchange_.seconds; }

  // The shared parameters' gradients summed over `shared` in one buffer; an expert's over
  // its copies; every gradient then divided by N = shared's size: each rank's loss is the
  // mean over its share of the batch, so the sum over the N shares (an expert's gradient
  // already sums its exchange group's) is N times the batch mean's.
  double finish() override {
    const float inv = 1.0f / static_cast<float>(groups_.shared.size());
    int64_t total = 0;
    for (const Part& p : parts_)
      if (!is_expert(p.name)) total += engine::shape_numel(p.shape);
    engine::Tensor flat = engine::Tensor::empty({total}, ctx_.device);
    int64_t at = 0;
    for (const Part& p : parts_) {
      if (is_expert(p.name)) continue;
      engine::copy_range(flat, at, p.mine.grad(), 0, p.mine.numel());
      at += p.mine.numel();
    }
    Stopwatch clock;
    shared_sum_.all_reduce_sum(flat);
    if (groups_.experts && groups_.experts->size() > 1) {
      data_parallel::CountedSum across(*groups_.experts, reduce_);
      for (Part& p : parts_)
        if (p.mine.defined() && is_expert(p.name)) {
          engine::Tensor g = p.mine.grad();
          across.all_reduce_sum(g);
        }
    }
    const double waited = clock.seconds();
    engine::scale_(flat, inv);
    at = 0;
    for (Part& p : parts_) {
      if (!p.mine.defined()) continue;
      engine::Tensor g = p.mine.grad();
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
      std::vector<engine::Tensor> experts, shared;
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
    std::map<std::string, engine::Tensor> target;
    if (whole_)
      for (auto& [name, t] : whole_->named_parameters()) target[name] = t;
    for (const Part& p : parts_) {
      if (!is_expert(p.name)) {
        if (whole_) target.at(p.name).copy_from(p.mine);
        continue;
      }
      engine::Tensor buf = p.mine.defined() ? p.mine.detach().clone() : engine::Tensor::zeros(p.shape, ctx_.device);
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
    nlohmann::json comm = step_comm_json(backend_, a2a + reduce, r.comm_exposed);
    comm["all_to_all_bytes"] = a2a.bytes;
    comm["all_reduce_bytes"] = reduce.bytes;
    return {{"comm", comm},
            {"moe", {{"choices", stats_->choices}, {"dropped", stats_->dropped}, {"load", stats_->load}}}};
  }

  // This step's all-to-alls and gradient sums so far; what they moved since the start.
  CommCounters step_all_to_all() const { return a2a_.since(before_a2a_); }
  CommCounters step_reduce() const { return reduce_.since(before_reduce_); }
  CommCounters all_counters() const { return a2a_ + reduce_; }

 private:
  const RoleContext& ctx_;
  ExpertGroups groups_;
  std::string backend_;
  CommCounters a2a_, before_a2a_, reduce_, before_reduce_, gather_counters_;
  CountedExchanger exchange_;
  data_parallel::CountedSum sum_, shared_sum_, gather_sum_;
  std::shared_ptr<workloads::MoeStats> stats_ = std::make_shared<workloads::MoeStats>();
  std::vector<Part> parts_;
  std::shared_ptr<engine::Model> whole_;  // rank 0, between gather_model and release_model
};

}  // namespace quartet::trainers::expert_parallel

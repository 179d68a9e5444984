#include "trainers/data_parallel/sharded_model.h"

#include <stdexcept>
#include <string>

#include "engine/autograd.h"

namespace quartet::trainers {

std::vector<int> stage_of_parameters(engine::Model& model) {
  const std::vector<engine::Tensor> params = model.parameters();
  std::vector<int> stage_of(params.size(), -1);
  for (int s = 0; s < model.num_stages(); ++s)
    for (const engine::Tensor& p : model.stage(s).parameters())
      for (size_t i = 0; i < params.size(); ++i)
        if (params[i].impl() == p.impl()) stage_of[i] = s;
  for (size_t i = 0; i < params.size(); ++i)
    if (stage_of[i] < 0)
      throw std::logic_error("parameter " + std::to_string(i) + " belongs to no stage of the model");
  return stage_of;
}

ShardedModel::ShardedModel(engine::Model& model, GradReducer& grads, const engine::Tensor& shard)
    : model_(model), grads_(grads), shard_(shard), params_(model.parameters()), stages_(model.num_stages()) {
  const std::vector<int> stage_of = stage_of_parameters(model);
  for (int s = 0; s < model.num_stages(); ++s) {
    stages_[s].buckets = grads.buckets_of_group(s);
    stages_[s].resident = true;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const int s = stage_of[i];
    stages_[s].params += 1;
    params_[i].add_grad_ready_hook([this, s](const engine::Tensor&) { on_grad_ready(s); });
  }
  model_.set_stage_hooks(this);
}

ShardedModel::~ShardedModel() {
  model_.set_stage_hooks(nullptr);
  // The grad-ready hooks are the parameters' (GradReducer's among them): the data-parallel
  // rank that owns both drops them together when it ends.
}

void ShardedModel::prefetch(int s) {
  if (s < 0 || s >= static_cast<int>(stages_.size())) return;
  Stage& st = stages_[s];
  if (st.resident || st.gathering) return;
  for (int b : st.buckets) grads_.gather_async(b, shard_);
  st.gathering = true;
}

void ShardedModel::ensure(int s) {
  Stage& st = stages_[s];
  if (st.resident) return;
  prefetch(s);
  for (int b : st.buckets) waited_ += grads_.gather_wait(b);
  st.gathering = false;
  st.resident = true;
}

void ShardedModel::release(int s) {
  Stage& st = stages_[s];
  if (whole_) return;
  if (st.gathering) ensure(s);  // a gather in flight finishes before its parameters go
  if (!st.resident) return;
  for (int b : st.buckets) grads_.release(b);
  st.resident = false;
}

void ShardedModel::before_forward(int s) {
  if (whole_) return;
  ensure(s);
  prefetch(s + 1);
}

void ShardedModel::after_forward(int s) {
  // The last stage's backward follows its forward at once: kept for it.
  if (engine::grad_enabled() && s + 1 == static_cast<int>(stages_.size())) return;
  release(s);
}

void ShardedModel::before_backward(int s) {
  if (whole_) return;
  ensure(s);
  prefetch(s - 1);
}

void ShardedModel::begin_backward() {
  for (Stage& st : stages_) st.pending = st.params;
}

void ShardedModel::on_grad_ready(int s) {
  Stage& st = stages_[s];
  if (st.pending > 0 && --st.pending == 0) release(s);
}

void ShardedModel::gather_all() {
  for (size_t s = 0; s < stages_.size(); ++s) prefetch(static_cast<int>(s));
  for (size_t s = 0; s < stages_.size(); ++s) ensure(static_cast<int>(s));
  whole_ = true;
}

void ShardedModel::release_all() {
  whole_ = false;
  for (size_t s = 0; s < stages_.size(); ++s) release(static_cast<int>(s));
}

}  // namespace quartet::trainers

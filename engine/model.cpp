#include "engine/model.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "engine/autograd.h"

namespace quartet::engine {

Model& Model::add_stage(const std::string& name, std::shared_ptr<Module> stage) {
  if (name.empty() || name.find('.') != std::string::npos)
    throw std::invalid_argument("stage name \"" + name + "\" must be non-empty and contain no '.'");
  for (const auto& n : names_)
    if (n == name) throw std::invalid_argument("duplicate stage name \"" + name + "\"");
  register_module(name, stage);
  names_.push_back(name);
  stages_.push_back(std::move(stage));
  return *this;
}

int Model::stage_index(const std::string& name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int>(i);
  std::string known;
  for (const auto& n : names_) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown stage \"" + name + "\"; this model's stages are: " + known);
}

Module& Model::stage(int i) {
  if (i < 0 || i >= num_stages())
    throw std::out_of_range("stage index " + std::to_string(i) + " out of range");
  return *stages_[i];
}

TensorList Model::forward_stages(const TensorList& inputs, int begin, int end) {
  if (begin < 0 || end > num_stages() || begin > end)
    throw std::out_of_range("stages [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") out of range for " + std::to_string(num_stages()) + " stages");
  TensorList x = inputs;
  for (int i = begin; i < end; ++i) x = hooks_ ? hooked_stage(i, x) : run_stage(i, x);
  return x;
}

TensorList Model::run_stage(int i, const TensorList& inputs) {
  return checkpointing_ && grad_enabled() && i + 1 < num_stages() ? checkpoint_stage(i, inputs)
                                                                   : stages_[i]->forward_list(inputs);
}

TensorList Model::hooked_stage(int i, const TensorList& inputs) {
  StageHooks* hooks = hooks_;
  hooks->before_forward(i);
  TensorList out = run_stage(i, inputs);
  hooks->after_forward(i);
  if (!grad_enabled()) return out;
  for (Tensor& y : out) {
    if (!y.requires_grad()) continue;
    bool passed_through = false;
    for (const Tensor& x : inputs) passed_through = passed_through || x.impl() == y.impl();
    if (passed_through) continue;
    Tensor boundary = y.detach();
    record(boundary, "stage_boundary", {y}, [hooks, i](const Tensor& g) {
      hooks->before_backward(i);
      return TensorList{g};
    });
    y = boundary;
  }
  return out;
}

namespace {

// Puts a stage's buffers, generators and train/eval mode back as they were when the
// guard was made.
class StageStateGuard {
 public:
  explicit StageStateGuard(Module& stage) : stage_(stage), training_(stage.training()) {
    MemTagScope tag(MemTag::workspace);
    for (auto& [name, b] : stage.named_buffers()) {
      buffers_.push_back(b);
      saved_.push_back(b.clone());
    }
    for (Generator* g : stage.generators()) rng_.push_back(g->state());
  }
  ~StageStateGuard() {
    for (size_t k = 0; k < buffers_.size(); ++k) buffers_[k].copy_from(saved_[k]);
    std::vector<Generator*> gens = stage_.generators();
    for (size_t k = 0; k < gens.size() && k < rng_.size(); ++k) gens[k]->set_state(rng_[k]);
    if (stage_.training() != training_) stage_.train(training_);
  }
  StageStateGuard(const StageStateGuard&) = delete;
  StageStateGuard& operator=(const StageStateGuard&) = delete;

 private:
  Module& stage_;
  bool training_;
  std::vector<Tensor> buffers_, saved_;
  std::vector<std::string> rng_;
};

}  // namespace

TensorList Model::checkpoint_stage(int i, const TensorList& inputs) {
  std::shared_ptr<Module> stage = stages_[i];
  // Where the stage's generators stand before forward draws: the recompute starts there.
  std::vector<std::string> rng;
  for (Generator* g : stage->generators()) rng.push_back(g->state());
  const bool training = stage->training();
  auto forward = [&stage](const TensorList& xs) { return stage->forward_list(xs); };
  auto recompute = [stage, rng = std::move(rng), training](const TensorList& xs) {
    StageStateGuard keep(*stage);  // what forward left: restored once the recompute is done
    std::vector<Generator*> gens = stage->generators();
    for (size_t k = 0; k < gens.size() && k < rng.size(); ++k) gens[k]->set_state(rng[k]);
    if (stage->training() != training) stage->train(training);
    return stage->forward_list(xs);
  };
  return checkpoint(forward, std::move(recompute), inputs, stage->parameters());
}

Tensor Model::forward(const Tensor& x) {
  TensorList out = forward_stages({x}, 0, num_stages());
  if (out.size() != 1)
    throw std::logic_error("model ended with " + std::to_string(out.size()) + " tensors, expected 1");
  return out[0];
}

}  // namespace quartet::engine

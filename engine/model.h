#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/nn.h"

namespace quartet::engine {

// A model is a list of named stages; each stage maps a list of tensors to a list of
// tensors (skip connections travel as extra tensors). Split learning cuts between two
// stages, so stage names are part of a model's interface. Parameter names are
// "<stage>.<path inside the stage>", e.g. "conv1.0.weight".
// Told around each stage's forward and before its backward: where fully sharded data
// parallelism (ZeRO-3) gathers a stage's parameters and frees them again. Called on the
// thread that runs forward or backward.
class StageHooks {
 public:
  virtual ~StageHooks() = default;
  virtual void before_forward(int stage) = 0;
  virtual void after_forward(int stage) = 0;
  // Once backward reaches one of the stage's outputs, before any of the stage's own
  // backward runs (and, checkpointed, before its recompute).
  virtual void before_backward(int stage) = 0;
};

class Model : public Module {
 public:
  Model& add_stage(const std::string& name, std::shared_ptr<Module> stage);
  const std::vector<std::string>& stage_names() const { return names_; }
  int num_stages() const { return static_cast<int>(stages_.size()); }
  // Throws std::invalid_argument listing the stage names when `name` is not one.
  int stage_index(const std::string& name) const;
  Module& stage(int i);

  // Runs stages [begin, end) on `inputs`. With checkpointing on and grad mode on, every
  // stage but the model's last runs as an engine::checkpoint segment (engine/autograd.h):
  // forward keeps only each stage's inputs, backward recomputes the stage with its graph.
  // The last stage is left alone, as PyTorch's checkpoint_sequential leaves its last
  // segment: backward would recompute it at once, for no memory saved. A cut model
  // checkpoints each side's stages the same way (a split client's last stage included).
  // The recompute sees the stage as forward saw it: its generators (Dropout) are rewound
  // to where forward started, and its buffers (BatchNorm running statistics, which a
  // training forward updates) are put back afterwards, so they move once per forward,
  // as without checkpointing; the train/eval mode forward ran in is used again.
  TensorList forward_stages(const TensorList& inputs, int begin, int end);
  // All stages; requires one input and one output.
  Tensor forward(const Tensor& x) override;

  // Hooks for every forward_stages() from now on (nullptr: none); not owned. With grad
  // mode on, each stage output that the stage computed (not an input passed through) is
  // wrapped in an identity op whose backward calls before_backward.
  void set_stage_hooks(StageHooks* hooks) { hooks_ = hooks; }

  // Activation checkpointing per stage (off by default): compute traded for memory.
  void set_checkpointing(bool on) { checkpointing_ = on; }
  bool checkpointing() const { return checkpointing_; }

 private:
  TensorList checkpoint_stage(int i, const TensorList& inputs);
  TensorList run_stage(int i, const TensorList& inputs);
  TensorList hooked_stage(int i, const TensorList& inputs);

  bool checkpointing_ = false;
  StageHooks* hooks_ = nullptr;
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<Module>> stages_;
};

}  // namespace quartet::engine

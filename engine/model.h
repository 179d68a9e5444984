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
class Model : public Module {
 public:
  Model& add_stage(const std::string& name, std::shared_ptr<Module> stage);
  const std::vector<std::string>& stage_names() const { return names_; }
  int num_stages() const { return static_cast<int>(stages_.size()); }
  // Throws std::invalid_argument listing the stage names when `name` is not one.
  int stage_index(const std::string& name) const;
  Module& stage(int i);

  // Runs stages [begin, end) on `inputs`.
  TensorList forward_stages(const TensorList& inputs, int begin, int end);
  // All stages; requires one input and one output.
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<Module>> stages_;
};

}  // namespace quartet::engine

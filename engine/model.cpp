#include "engine/model.h"

#include <stdexcept>

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
  for (int i = begin; i < end; ++i) x = stages_[i]->forward_list(x);
  return x;
}

Tensor Model::forward(const Tensor& x) {
  TensorList out = forward_stages({x}, 0, num_stages());
  if (out.size() != 1)
    throw std::logic_error("model ended with " + std::to_string(out.size()) + " tensors, expected 1");
  return out[0];
}

}  // namespace quartet::engine

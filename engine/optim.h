#pragma once

#include <string>
#include <vector>

#include "engine/nn.h"
#include "engine/tensor.h"

namespace quartet::engine {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, float lr);
  virtual ~Optimizer() = default;
  // Updates every parameter that has a gradient; parameters without one are skipped.
  virtual void step() = 0;
  void zero_grad();
  float lr() const { return lr_; }
  void set_lr(float lr) { lr_ = lr; }
  const std::vector<Tensor>& params() const { return params_; }
  // Optimizer state as named tensors ("<param index>.<slot>"), for checkpoints;
  // load_state requires the names and shapes state() would give.
  virtual NamedTensors state() const = 0;
  virtual void load_state(const NamedTensors& state) = 0;

 protected:
  std::vector<Tensor> params_;
  float lr_;
};

struct SgdOptions {
  float lr = 0.01f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  bool nesterov = false;
  float weight_decay = 0.0f;
};

// PyTorch's SGD: g += wd * p; buf = momentum * buf + (1 - dampening) * g (buf = g on
// the first step); g = nesterov ? g + momentum * buf : buf; p -= lr * g.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SgdOptions opt);
  void step() override;
  NamedTensors state() const override;
  void load_state(const NamedTensors& state) override;

 private:
  SgdOptions opt_;
  std::vector<Tensor> momentum_;  // undefined until a parameter's first step
};

// Scales all gradients so their global L2 norm is at most max_norm (PyTorch's
// clip_grad_norm_: coefficient max_norm / (norm + 1e-6), clamped to 1). Returns the norm
// before clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace quartet::engine

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

struct AdamOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;    // in [0, 1)
  float beta2 = 0.999f;  // in [0, 1)
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // L2: added to the gradient
};

// PyTorch's Adam (amsgrad off), per parameter with its own step count t:
//   t += 1; g += wd * p; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
// state(): "<i>.exp_avg", "<i>.exp_avg_sq" (parameter-shaped) and "<i>.step" (a [1]
// host tensor holding t as a float, exact up to 2^24 steps) for every parameter that
// has stepped, as PyTorch's state_dict keeps them. load_state requires all three per
// parameter, shapes as the parameter's and a whole step >= 1.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions opt);
  void step() override;
  NamedTensors state() const override;
  void load_state(const NamedTensors& state) override;

 protected:
  // decoupled: AdamW's weight decay (see below) instead of L2; name prefixes errors.
  Adam(std::vector<Tensor> params, AdamOptions opt, bool decoupled, const char* name);

 private:
  AdamOptions opt_;
  bool decoupled_;
  const char* name_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;  // undefined until a parameter's first step
  std::vector<int64_t> steps_;
};

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;  // decoupled, PyTorch's AdamW default
};

// PyTorch's AdamW: p -= lr * wd * p first, then Adam's update without L2 on the
// gradient. State as Adam's.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions opt);
};

// Scales all gradients so their global L2 norm is at most max_norm (PyTorch's
// clip_grad_norm_: coefficient max_norm / (norm + 1e-6), clamped to 1). Returns the norm
// before clipping.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace quartet::engine

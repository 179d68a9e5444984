#pragma once

// Modules: things with parameters. Names follow PyTorch's (dotted paths, children of a
// Sequential named "0", "1", ...), so state dicts move between the two unchanged.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/ops.h"
#include "engine/random.h"
#include "engine/tensor.h"

namespace quartet::engine {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  // A module used as a model stage maps a list of tensors to a list of tensors; the
  // default takes exactly one tensor and returns forward() of it.
  virtual TensorList forward_list(const TensorList& inputs);
  Tensor operator()(const Tensor& x) { return forward(x); }

  // Registration order, recursively, with dotted names ("0.weight", "fc1.bias").
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;  // non-trainable state (running statistics)
  // Parameters then buffers: what safetensors saves.
  NamedTensors state_dict() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }

 protected:
  // Marks `t` trainable; it should have been made under MemTagScope(parameters).
  Tensor register_parameter(std::string name, Tensor t);
  Tensor register_buffer(std::string name, Tensor t);
  void register_module(std::string name, std::shared_ptr<Module> child);
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

 private:
  void collect(const std::string& prefix, bool params, NamedTensors& out) const;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// PyTorch's default init: weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))
// (kaiming_uniform with a = sqrt(5) reduces to that bound for the weight).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias = true);
  Tensor forward(const Tensor& x) override;  // x: (N, in) -> (N, out)
  Tensor weight, bias;
};

class Conv : public Module {
 public:
  // kernel: one size per spatial dim (2 for Conv2d, 3 for Conv3d).
  Conv(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel, ConvOptions opt,
       Generator& gen, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  ConvOptions options;
};

class Conv2d : public Conv {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, ConvOptions opt, Generator& gen,
         bool bias = true)
      : Conv(in_channels, out_channels, {kernel, kernel}, std::move(opt), gen, bias) {}
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class MaxPool : public Module {
 public:
  explicit MaxPool(PoolOptions opt) : options(std::move(opt)) {}
  Tensor forward(const Tensor& x) override { return max_pool(x, options); }
  PoolOptions options;
};

class Flatten : public Module {
 public:
  explicit Flatten(int start_dim = 1) : start_dim_(start_dim) {}
  Tensor forward(const Tensor& x) override { return flatten(x, start_dim_); }

 private:
  int start_dim_;
};

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential& add(std::shared_ptr<Module> m);
  template <class M, class... Args>
  Sequential& emplace(Args&&... args) {
    return add(std::make_shared<M>(std::forward<Args>(args)...));
  }
  Tensor forward(const Tensor& x) override;
  size_t size() const { return children().size(); }
};

}  // namespace quartet::engine

#pragma once

// Modules: things with parameters. Names follow PyTorch's (dotted paths, children of a
// Sequential named "0", "1", ...), so state dicts move between the two unchanged.

#include <functional>
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

  // The random generators this module and its children draw from in forward (Dropout's),
  // in registration order: activation checkpointing replays them in its recompute.
  std::vector<Generator*> generators();

  // The reducer of the batch norms this module runs itself (its children have their
  // own): SyncBatchNorm when set. BatchNorm and imported graphs take it; others have none.
  virtual void set_stats_reducer(StatsReducer*) {}

  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }

  // Calls fn on this module, then on each child in registration order, recursively.
  void visit(const std::function<void(Module&)>& fn);
  // Moves every parameter and buffer to `device`, in place (Tensor::move_to).
  void to(const Device& device);
  // Where its parameters and buffers live: the cpu for a module without any.
  Device device() const;

 protected:
  // Marks `t` trainable; it should have been made under MemTagScope(parameters).
  Tensor register_parameter(std::string name, Tensor t);
  Tensor register_buffer(std::string name, Tensor t);
  void register_module(std::string name, std::shared_ptr<Module> child);
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  // This module's own generator, if its forward draws random numbers.
  virtual Generator* own_generator() { return nullptr; }

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

class Conv3d : public Conv {
 public:
  Conv3d(int64_t in_channels, int64_t out_channels, int64_t kernel, ConvOptions opt, Generator& gen,
         bool bias = true)
      : Conv(in_channels, out_channels, {kernel, kernel, kernel}, std::move(opt), gen, bias) {}
};

// weight (in, out, *kernel), PyTorch's layout, and PyTorch's init: its fan_in comes from
// weight.size(1), so the bound is 1/sqrt(out_channels * prod(kernel)) for weight and bias.
class ConvTranspose : public Module {
 public:
  // kernel: one size per spatial dim (2 or 3).
  ConvTranspose(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel,
                ConvTransposeOptions opt, Generator& gen, bool bias = true);
  Tensor forward(const Tensor& x) override { return conv_transpose(x, weight, bias, options); }
  Tensor weight, bias;
  ConvTransposeOptions options;
};

class Upsample : public Module {
 public:
  explicit Upsample(std::vector<int64_t> scale, UpsampleMode mode = UpsampleMode::nearest)
      : scale(std::move(scale)), mode(mode) {}
  Tensor forward(const Tensor& x) override { return upsample(x, scale, mode); }
  std::vector<int64_t> scale;
  UpsampleMode mode;
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

class AvgPool : public Module {
 public:
  explicit AvgPool(PoolOptions opt) : options(std::move(opt)) {}
  Tensor forward(const Tensor& x) override { return avg_pool(x, options); }
  PoolOptions options;
};

// (N, C, *spatial) -> (N, C).
class GlobalAvgPool : public Module {
 public:
  Tensor forward(const Tensor& x) override { return global_avg_pool(x); }
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(float negative_slope = 0.01f) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, negative_slope); }
  float negative_slope;
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
};

// Inverted dropout while training, the identity in eval mode. Owns its generator, seeded
// here, so the same seed drops the same elements on every run. requires 0 <= p < 1.
class Dropout : public Module {
 public:
  explicit Dropout(float p = 0.5f, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;
  Generator& generator() { return gen_; }  // for checkpoints: state() / set_state()
  float p;

 protected:
  Generator* own_generator() override { return &gen_; }

 private:
  Generator gen_;
};

// Parameters weight (1s) and bias (0s), buffers running_mean (0s) and running_var (1s),
// named as PyTorch names them; PyTorch's num_batches_tracked buffer is not kept (it only
// matters for momentum=None), so a PyTorch state dict needs that entry dropped to load.
// Input (N, C), (N, C, H, W) or (N, C, D, H, W). training() picks batch or running
// statistics. With a reducer set, training statistics span every process (SyncBatchNorm).
class BatchNorm : public Module {
 public:
  explicit BatchNorm(int64_t channels, float eps = 1e-5f, float momentum = 0.1f);
  Tensor forward(const Tensor& x) override;
  // The reducer must outlive this module's forward and backward passes; null: local only.
  void set_reducer(StatsReducer* reducer) { options.reducer = reducer; }
  void set_stats_reducer(StatsReducer* reducer) override { set_reducer(reducer); }
  Tensor weight, bias, running_mean, running_var;
  BatchNormOptions options;
};

// groups must divide channels; affine: weight (1s) and bias (0s) per channel.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t groups, int64_t channels, float eps = 1e-5f, bool affine = true);
  Tensor forward(const Tensor& x) override { return group_norm(x, groups, weight, bias, eps); }
  int64_t groups;
  float eps;
  Tensor weight, bias;  // undefined unless affine
};

// Per-sample, per-channel statistics in training and eval alike (PyTorch's InstanceNorm
// defaults: affine=false, no running statistics): group_norm with groups == channels.
class InstanceNorm : public GroupNorm {
 public:
  explicit InstanceNorm(int64_t channels, float eps = 1e-5f, bool affine = false)
      : GroupNorm(channels, channels, eps, affine) {}
};

// weight (num, dim) ~ N(0, 1), PyTorch's nn.Embedding default. forward(indices): whole
// numbers in [0, num) stored as floats, any shape -> (*indices.shape, dim).
class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, Generator& gen);
  Tensor forward(const Tensor& indices) override { return embedding(indices, weight); }
  Tensor weight;
};

// Normalises over the last dim (features); weight (1s) and bias (0s), PyTorch's names.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t features, float eps = 1e-5f);
  Tensor forward(const Tensor& x) override { return layer_norm(x, weight, bias, eps); }
  float eps;
  Tensor weight, bias;
};

// The exact (erf) GELU, PyTorch's nn.GELU() default.
class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return gelu(x); }
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

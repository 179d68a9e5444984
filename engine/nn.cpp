#include "engine/nn.h"

#include <typeinfo>

#include <cmath>
#include <stdexcept>

#include "engine/autograd.h"
#include "engine/ops/op_checks.h"

namespace quartet::engine {

TensorList Module::forward_list(const TensorList& inputs) {
  if (inputs.size() != 1)
    throw std::invalid_argument("this stage takes one tensor, got " + std::to_string(inputs.size()));
  return {forward(inputs[0])};
}

void Module::collect(const std::string& prefix, bool params, NamedTensors& out) const {
  for (const auto& [name, t] : params ? params_ : buffers_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", params, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, out);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  for (auto& nb : named_buffers()) out.push_back(std::move(nb));
  return out;
}

std::vector<Generator*> Module::generators() {
  std::vector<Generator*> out;
  if (Generator* g = own_generator()) out.push_back(g);
  for (auto& [name, child] : children_)
    for (Generator* g : child->generators()) out.push_back(g);
  return out;
}

void Module::visit(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (auto& [name, child] : children_) child->visit(fn);
}

void Module::to(const Device& device) {
  for (auto& [name, t] : state_dict()) t.move_to(device);
}

Device Module::device() const {
  const NamedTensors state = state_dict();
  return state.empty() ? Device::cpu() : state.front().second.device();
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

Tensor Module::register_parameter(std::string name, Tensor t) {
  t.set_requires_grad(true);
  params_.emplace_back(std::move(name), t);
  return t;
}

Tensor Module::register_buffer(std::string name, Tensor t) {
  buffers_.emplace_back(std::move(name), t);
  return t;
}

void Module::register_module(std::string name, std::shared_ptr<Module> child) {
  if (!child) throw std::invalid_argument("register_module: null module " + name);
  children_.emplace_back(std::move(name), std::move(child));
}

namespace {

Tensor init_uniform(const Shape& shape, int64_t fan_in, Generator& gen) {
  MemTagScope tag(MemTag::parameters);
  Tensor t = Tensor::empty(shape);
  const float bound = fan_in > 0 ? 1.0f / std::sqrt(static_cast<float>(fan_in)) : 0.0f;
  uniform_(t, -bound, bound, gen);
  return t;
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, Generator& gen, bool with_bias) {
  if (in_features < 1 || out_features < 1)
    throw std::invalid_argument("Linear: sizes must be >= 1, got " + std::to_string(in_features) + " -> " +
                                std::to_string(out_features));
  weight = register_parameter("weight", init_uniform({out_features, in_features}, in_features, gen));
  if (with_bias) bias = register_parameter("bias", init_uniform({out_features}, in_features, gen));
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

Conv::Conv(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel, ConvOptions opt,
           Generator& gen, bool with_bias)
    : options(std::move(opt)) {
  if (in_channels < 1 || out_channels < 1 || kernel.empty())
    throw std::invalid_argument("Conv: channels must be >= 1 and a kernel size given");
  Shape shape{out_channels, in_channels};
  int64_t fan_in = in_channels;
  for (int64_t k : kernel) {
    if (k < 1) throw std::invalid_argument("Conv: kernel sizes must be >= 1");
    shape.push_back(k);
    fan_in *= k;
  }
  weight = register_parameter("weight", init_uniform(shape, fan_in, gen));
  if (with_bias) bias = register_parameter("bias", init_uniform({out_channels}, fan_in, gen));
}

Tensor Conv::forward(const Tensor& x) { return conv(x, weight, bias, options); }

ConvTranspose::ConvTranspose(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel,
                             ConvTransposeOptions opt, Generator& gen, bool with_bias)
    : options(std::move(opt)) {
  if (in_channels < 1 || out_channels < 1 || kernel.empty())
    throw std::invalid_argument("ConvTranspose: channels must be >= 1 and a kernel size given");
  Shape shape{in_channels, out_channels};
  int64_t fan_in = out_channels;
  for (int64_t k : kernel) {
    if (k < 1) throw std::invalid_argument("ConvTranspose: kernel sizes must be >= 1");
    shape.push_back(k);
    fan_in *= k;
  }
  weight = register_parameter("weight", init_uniform(shape, fan_in, gen));
  if (with_bias) bias = register_parameter("bias", init_uniform({out_channels}, fan_in, gen));
}

Dropout::Dropout(float p, uint64_t seed) : p(p), gen_(seed) {
  if (!(p >= 0.0f && p < 1.0f))
    throw std::invalid_argument("Dropout: p must be in [0, 1), got " + detail::float_str(p));
}

Tensor Dropout::forward(const Tensor& x) { return training() ? dropout(x, p, gen_) : x; }

BatchNorm::BatchNorm(int64_t channels, float eps, float momentum) {
  if (channels < 1)
    throw std::invalid_argument("BatchNorm: channels must be >= 1, got " + std::to_string(channels));
  options.eps = eps;
  options.momentum = momentum;
  MemTagScope tag(MemTag::parameters);
  weight = register_parameter("weight", Tensor::full({channels}, 1.0f));
  bias = register_parameter("bias", Tensor::zeros({channels}));
  running_mean = register_buffer("running_mean", Tensor::zeros({channels}));
  running_var = register_buffer("running_var", Tensor::full({channels}, 1.0f));
}

Tensor BatchNorm::forward(const Tensor& x) {
  return batch_norm(x, weight, bias, running_mean, running_var, training(), options);
}

GroupNorm::GroupNorm(int64_t groups, int64_t channels, float eps, bool affine) : groups(groups), eps(eps) {
  if (groups < 1 || channels < 1 || channels % groups != 0)
    throw std::invalid_argument("GroupNorm: groups must be >= 1 and divide the channels, got " +
                                std::to_string(groups) + " groups for " + std::to_string(channels) +
                                " channels");
  if (!affine) return;
  MemTagScope tag(MemTag::parameters);
  weight = register_parameter("weight", Tensor::full({channels}, 1.0f));
  bias = register_parameter("bias", Tensor::zeros({channels}));
}

Embedding::Embedding(int64_t num, int64_t dim, Generator& gen) {
  if (num < 1 || dim < 1)
    throw std::invalid_argument("Embedding: num and dim must be >= 1, got num " + std::to_string(num) + ", dim " +
                                std::to_string(dim));
  MemTagScope tag(MemTag::parameters);
  Tensor w = Tensor::empty({num, dim});
  normal_(w, 0.0f, 1.0f, gen);
  weight = register_parameter("weight", w);
}

LayerNorm::LayerNorm(int64_t features, float eps) : eps(eps) {
  if (features < 1) throw std::invalid_argument("LayerNorm: features must be >= 1, got " + std::to_string(features));
  MemTagScope tag(MemTag::parameters);
  weight = register_parameter("weight", Tensor::full({features}, 1.0f));
  bias = register_parameter("bias", Tensor::zeros({features}));
}

Sequential& Sequential::add(std::shared_ptr<Module> m) {
  register_module(std::to_string(children().size()), std::move(m));
  return *this;
}

// ReLU then max pooling runs as max pooling then ReLU: max is monotone, so
// relu(max(window)) = max(relu(window)) exactly, and the gradient reaches the same
// input cell (or none, where the window's maximum is not positive). The ReLU then works
// on the pooled tensor, a quarter (2D) or an eighth (3D) of the size, and the full-size
// ReLU output is never made nor kept for backward.
Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  const auto& list = children();
  for (size_t i = 0; i < list.size(); ++i) {
    Module& m = *list[i].second;
    if (i + 1 < list.size() && typeid(m) == typeid(ReLU) && typeid(*list[i + 1].second) == typeid(MaxPool)) {
      y = relu_reusing(max_pool(y, static_cast<const MaxPool&>(*list[i + 1].second).options));
      ++i;
      continue;
    }
    // A layer's output is handed to a ReLU that follows, so that it can take its place.
    y = typeid(m) == typeid(ReLU) ? relu_reusing(std::move(y)) : m.forward(y);
  }
  return y;
}

}  // namespace quartet::engine

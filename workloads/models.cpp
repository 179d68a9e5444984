#include "workloads/models.h"

#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/random.h"
#include "medical3d/models.h"
#include "medical3d/phantom.h"
#include "workloads/onnx/model.h"

namespace quartet::workloads {
namespace {

using engine::Generator;
using engine::Model;
using engine::Sequential;
using engine::Tensor;
using engine::TensorList;

engine::ConvOptions padding(int64_t p) {
  engine::ConvOptions o;
  o.padding = {p};
  return o;
}

engine::ConvOptions stride_padding(int64_t s, int64_t p) {
  engine::ConvOptions o;
  o.stride = {s};
  o.padding = {p};
  return o;
}

engine::PoolOptions pool2() {
  engine::PoolOptions o;
  o.kernel = {2};
  return o;
}

std::shared_ptr<Sequential> seq() { return std::make_shared<Sequential>(); }

// x: (N, 1, 28, 28) -> 784 -> 256 -> 128 -> 10
std::shared_ptr<Model> build_mlp(Generator& gen) {
  auto m = std::make_shared<Model>();
  auto fc1 = seq();
  fc1->emplace<engine::Flatten>(1).emplace<engine::Linear>(784, 256, gen).emplace<engine::ReLU>();
  auto fc2 = seq();
  fc2->emplace<engine::Linear>(256, 128, gen).emplace<engine::ReLU>();
  auto fc3 = seq();
  fc3->emplace<engine::Linear>(128, 10, gen);
  m->add_stage("fc1", fc1).add_stage("fc2", fc2).add_stage("fc3", fc3);
  return m;
}

// LeCun et al. 1998 with ReLU and max pooling: 28x28 (padded 2) -> 6x14x14 -> 16x5x5.
std::shared_ptr<Model> build_lenet5(Generator& gen) {
  auto m = std::make_shared<Model>();
  auto conv1 = seq();
  conv1->emplace<engine::Conv2d>(1, 6, 5, padding(2), gen).emplace<engine::ReLU>().emplace<engine::MaxPool>(pool2());
  auto conv2 = seq();
  conv2->emplace<engine::Conv2d>(6, 16, 5, padding(0), gen).emplace<engine::ReLU>().emplace<engine::MaxPool>(pool2());
  auto fc1 = seq();
  fc1->emplace<engine::Flatten>(1).emplace<engine::Linear>(400, 120, gen).emplace<engine::ReLU>();
  auto fc2 = seq();
  fc2->emplace<engine::Linear>(120, 84, gen).emplace<engine::ReLU>();
  auto fc3 = seq();
  fc3->emplace<engine::Linear>(84, 10, gen);
  m->add_stage("conv1", conv1).add_stage("conv2", conv2).add_stage("fc1", fc1).add_stage("fc2", fc2).add_stage("fc3", fc3);
  return m;
}

// Two 3x3 conv blocks (PyTorch's MNIST example) and a head of `hidden` units:
// 28 -> 32x14x14 -> 64x7x7 -> hidden -> 10.
std::shared_ptr<Model> build_conv_net(Generator& gen, int64_t hidden) {
  auto m = std::make_shared<Model>();
  auto conv1 = seq();
  conv1->emplace<engine::Conv2d>(1, 32, 3, padding(1), gen).emplace<engine::ReLU>().emplace<engine::MaxPool>(pool2());
  auto conv2 = seq();
  conv2->emplace<engine::Conv2d>(32, 64, 3, padding(1), gen).emplace<engine::ReLU>().emplace<engine::MaxPool>(pool2());
  auto fc1 = seq();
  fc1->emplace<engine::Flatten>(1).emplace<engine::Linear>(3136, hidden, gen).emplace<engine::ReLU>();
  auto fc2 = seq();
  fc2->emplace<engine::Linear>(hidden, 10, gen);
  m->add_stage("conv1", conv1).add_stage("conv2", conv2).add_stage("fc1", fc1).add_stage("fc2", fc2);
  return m;
}

// cnn: a 128-unit head.
std::shared_ptr<Model> build_cnn(Generator& gen) { return build_conv_net(gen, 128); }

// cnn's two conv blocks under a 16x wider head (2048 units). The same cut tensors as cnn
// with 15x the weights (fc1 holds 99 % of them), so split learning against federated
// averaging crosses within tens of clients (docs/split.md).
std::shared_ptr<Model> build_cnn_wide(Generator& gen) { return build_conv_net(gen, 2048); }

// The first half of a residual block, a stage of its own so that a cut can fall inside
// the block: x -> {relu(bn1(conv1(x))), shortcut(x)}. The second tensor is the skip
// connection travelling to the next stage. shortcut is the identity when the shape is
// kept, else a strided 1x1 conv + BatchNorm projection (ResNet's option B), applied here
// so the skip crosses a cut at the block's output size.
// x: (N, in, H, W) -> {(N, out, H/s, W/s), (N, out, H/s, W/s)}.
class ResidualFork : public engine::Module {
 public:
  ResidualFork(int64_t in_channels, int64_t out_channels, int64_t stride, Generator& gen) {
    conv1_ = std::make_shared<engine::Conv2d>(in_channels, out_channels, 3, stride_padding(stride, 1), gen, false);
    bn1_ = std::make_shared<engine::BatchNorm>(out_channels);
    register_module("conv1", conv1_);
    register_module("bn1", bn1_);
    if (stride != 1 || in_channels != out_channels) {
      shortcut_ = std::make_shared<Sequential>();
      shortcut_->emplace<engine::Conv2d>(in_channels, out_channels, 1, stride_padding(stride, 0), gen, false)
          .emplace<engine::BatchNorm>(out_channels);
      register_module("shortcut", shortcut_);
    }
  }

  TensorList forward_list(const TensorList& inputs) override {
    if (inputs.size() != 1)
      throw std::invalid_argument("ResidualFork takes one tensor (the block input), got " +
                                  std::to_string(inputs.size()));
    const Tensor& x = inputs[0];
    return {engine::relu_reusing(bn1_->forward(conv1_->forward(x))), shortcut_ ? shortcut_->forward(x) : x};
  }

  Tensor forward(const Tensor&) override {
    throw std::logic_error("ResidualFork returns two tensors {main, skip}; call forward_list");
  }

 private:
  std::shared_ptr<engine::Conv2d> conv1_;
  std::shared_ptr<engine::BatchNorm> bn1_;
  std::shared_ptr<Sequential> shortcut_;  // null: identity
};

// The second half: {main, skip} -> relu(bn2(conv2(main)) + skip), shapes kept.
class ResidualJoin : public engine::Module {
 public:
  ResidualJoin(int64_t channels, Generator& gen) {
    conv2_ = std::make_shared<engine::Conv2d>(channels, channels, 3, stride_padding(1, 1), gen, false);
    bn2_ = std::make_shared<engine::BatchNorm>(channels);
    register_module("conv2", conv2_);
    register_module("bn2", bn2_);
  }

  TensorList forward_list(const TensorList& inputs) override {
    if (inputs.size() != 2)
      throw std::invalid_argument("ResidualJoin takes two tensors {main, skip}, got " +
                                  std::to_string(inputs.size()));
    return {engine::relu_reusing(engine::add(bn2_->forward(conv2_->forward(inputs[0])), inputs[1]))};
  }

  Tensor forward(const Tensor&) override {
    throw std::logic_error("ResidualJoin takes two tensors {main, skip}; call forward_list");
  }

 private:
  std::shared_ptr<engine::Conv2d> conv2_;
  std::shared_ptr<engine::BatchNorm> bn2_;
};

// A small CIFAR-style ResNet (He et al. 2016) for 28x28: a 3x3 stem and three basic
// blocks of 16, 32, 64 channels, each split into a fork and a join stage, so that half
// of the cuts send two tensors. 1x28x28 -> 16x28x28 -> 16x28x28 -> 32x14x14 -> 64x7x7
// -> 64 -> 10. Convolutions before a BatchNorm have no bias, as in torchvision.
std::shared_ptr<Model> build_resnet_mini(Generator& gen) {
  auto m = std::make_shared<Model>();
  auto stem = seq();
  stem->emplace<engine::Conv2d>(1, 16, 3, padding(1), gen, false)
      .emplace<engine::BatchNorm>(16)
      .emplace<engine::ReLU>();
  m->add_stage("stem", stem);
  struct Block {
    const char* name;
    int64_t in, out, stride;
  };
  for (const Block& b : {Block{"layer1", 16, 16, 1}, Block{"layer2", 16, 32, 2}, Block{"layer3", 32, 64, 2}}) {
    m->add_stage(std::string(b.name) + "a", std::make_shared<ResidualFork>(b.in, b.out, b.stride, gen));
    m->add_stage(std::string(b.name) + "b", std::make_shared<ResidualJoin>(b.out, gen));
  }
  auto head = seq();
  // Flatten of (N, 64) is the identity; it keeps the indices of PyTorch's usual
  // AdaptiveAvgPool2d(1) + Flatten + Linear head.
  head->emplace<engine::GlobalAvgPool>().emplace<engine::Flatten>(1).emplace<engine::Linear>(64, 10, gen);
  m->add_stage("head", head);
  return m;
}

// torchvision's ResNet-18: a 7x7/2 stem, 3x3/2 max pool, four layers of two basic blocks
// (64, 128, 256, 512 channels), global average pool, 512-classes. Each block is a fork
// and a join stage, as in resnet-mini.
std::shared_ptr<Model> build_resnet18(Generator& gen, int64_t in_channels, int classes) {
  auto m = std::make_shared<Model>();
  engine::PoolOptions pool;
  pool.kernel = {3};
  pool.stride = {2};
  pool.padding = {1};
  auto stem = seq();
  stem->emplace<engine::Conv2d>(in_channels, 64, 7, stride_padding(2, 3), gen, false)
      .emplace<engine::BatchNorm>(64)
      .emplace<engine::ReLU>()
      .emplace<engine::MaxPool>(pool);
  m->add_stage("stem", stem);
  int64_t in = 64;
  for (int layer = 1; layer <= 4; ++layer) {
    const int64_t out = int64_t{64} << (layer - 1);
    for (int block = 0; block < 2; ++block) {
      const std::string name = "layer" + std::to_string(layer) + "_" + std::to_string(block);
      const int64_t stride = layer > 1 && block == 0 ? 2 : 1;
      m->add_stage(name + "a", std::make_shared<ResidualFork>(in, out, stride, gen));
      m->add_stage(name + "b", std::make_shared<ResidualJoin>(out, gen));
      in = out;
    }
  }
  auto head = seq();
  head->emplace<engine::GlobalAvgPool>().emplace<engine::Flatten>(1).emplace<engine::Linear>(512, classes, gen);
  m->add_stage("head", head);
  return m;
}

struct Entry {
  const char* name;
  const char* description;
  std::function<std::shared_ptr<Model>(Generator&)> build;
  const char* task = kImageClassification;
  engine::Shape input_shape{1, 28, 28};
  int num_classes = 10;
  std::optional<GptConfig> gpt{};  // the transformers: what tensor parallelism splits
  std::optional<MoeConfig> moe{};  // the mixtures of experts (on gpt-mini): what expert parallelism spreads
};

// gpt-moe's registered settings (docs/models.md), and gpt-moe-dropless's: no capacity
// limit and no balance loss, so what a token meets does not depend on the other tokens
// of its forward pass (expert_parallel equals single on it). Both keep the router
// z-loss: a mean over tokens, it splits over micro-batches and ranks as the main loss does.
MoeConfig gpt_moe() { return MoeConfig{}; }
MoeConfig gpt_moe_dropless() { return MoeConfig{.capacity_factor = 0.0, .aux_loss = 0.0}; }

// gpt-mini's registered settings (docs/models.md).
GptConfig gpt_mini() { return GptConfig{.layers = 4, .heads = 4, .width = 128, .context = 128, .vocab = 256}; }

// unet3d's registered settings (docs/models.md): three levels of 16, 32, 64 channels.
std::shared_ptr<Model> build_unet3d(Generator& gen, int classes = medical3d::kPhantomClasses) {
  medical3d::UNet3dOptions o;
  o.depth = 3;
  o.base_channels = 16;
  o.norm = medical3d::UNetNorm::instance;
  o.classes = classes;
  return medical3d::make_unet3d(o, gen);
}

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"mlp", "three fully connected layers 784-256-128-10 with ReLU", build_mlp},
      {"lenet5", "LeNet-5: two 5x5 conv + max-pool blocks (6, 16 channels), then 120-84-10", build_lenet5},
      {"cnn", "two 3x3 conv + max-pool blocks (32, 64 channels), then 128-10", build_cnn},
      {"resnet-mini",
       "ResNet with BatchNorm: 3x3 stem, three basic blocks (16, 32, 64 channels; 1x1 projection "
       "shortcuts), global average pool, 64-10; each block is two stages, the skip crossing the cut",
       build_resnet_mini},
      {"cnn-wide", "cnn's two conv blocks (32, 64 channels) under a wide head, 2048-10 (6.5M parameters)",
       build_cnn_wide},
      {"unet3d",
       "3D U-Net: three levels (16, 32, 64 channels), two 3x3x3 conv-InstanceNorm-LeakyReLU per level, "
       "transposed-conv up, skips concatenated; a logit per class (3) and voxel; skips travel across cuts",
       [](Generator& gen) { return build_unet3d(gen); }, kVolumeSegmentation, {1, 32, 32, 32}, medical3d::kPhantomClasses},
      {"gpt-mini",
       "GPT over bytes: token and position embeddings, 4 pre-norm blocks (4-head causal self-attention, GELU MLP "
       "of 512), width 128, context 128, a logit per byte value; each block is a stage",
       [](Generator& gen) { return make_gpt(gpt_mini(), gen); }, kLanguageModel, {gpt_mini().context},
       static_cast<int>(gpt_mini().vocab), gpt_mini()},
      {"gpt-moe",
       "gpt-mini with the MLP of blocks 1 and 3 a mixture of 4 experts (each gpt-mini's MLP), top-2 routing, "
       "capacity factor 1.25, load-balancing loss 0.01; each block is a stage",
       [](Generator& gen) { return make_gpt_moe(gpt_mini(), gpt_moe(), gen); }, kLanguageModel,
       {gpt_mini().context}, static_cast<int>(gpt_mini().vocab), std::nullopt, gpt_moe()},
      {"gpt-moe-dropless",
       "gpt-moe without a capacity limit (no token dropped) and without the load-balancing loss",
       [](Generator& gen) { return make_gpt_moe(gpt_mini(), gpt_moe_dropless(), gen); }, kLanguageModel,
       {gpt_mini().context}, static_cast<int>(gpt_mini().vocab), std::nullopt, gpt_moe_dropless()},
  };
  return entries;
}

const Entry& find(const std::string& name) {
  for (const auto& e : registry())
    if (name == e.name) return e;
  std::string known;
  for (const auto& e : registry()) known += (known.empty() ? "" : ", ") + std::string(e.name);
  throw std::invalid_argument("unknown model \"" + name + "\"; known models: " + known);
}

// A transformer's entry; `what` names the split a model lacks in the message.
const Entry& find_gpt(const std::string& name, const std::string& what) {
  const Entry& e = find(name);
  if (e.gpt) return e;
  std::string known;
  for (const auto& other : registry())
    if (other.gpt) known += (known.empty() ? "" : ", ") + std::string(other.name);
  throw std::invalid_argument("model " + name + " has no " + what + " split; models that have one: " + known);
}
const Entry& find_tensor_parallel(const std::string& name) { return find_gpt(name, "tensor-parallel"); }

}  // namespace

std::shared_ptr<engine::Model> make_model(const std::string& name, uint64_t seed) {
  if (onnx::is_onnx_model(name)) return onnx::import_model(name.substr(std::strlen(onnx::kPrefix)), seed);
  const Entry& e = find(name);
  Generator gen(seed);
  return e.build(gen);
}

std::shared_ptr<engine::Model> make_model(const std::string& name, uint64_t seed, int classes) {
  if (onnx::is_onnx_model(name)) {
    const ModelInfo info = model_info(name);
    if (classes != info.num_classes)
      throw std::invalid_argument("model " + name + " gives " + std::to_string(info.num_classes) + " classes, not " +
                                  std::to_string(classes));
    return make_model(name, seed);
  }
  const Entry& e = find(name);
  if (classes == e.num_classes) return make_model(name, seed);
  if (name != "unet3d")
    throw std::invalid_argument("model " + name + " has " + std::to_string(e.num_classes) + " classes, not " +
                                std::to_string(classes) + "; only unet3d takes the data's number of classes");
  if (classes < 2 || classes > 256)
    throw std::invalid_argument("unet3d: classes must be in [2, 256], got " + std::to_string(classes));
  Generator gen(seed);
  return build_unet3d(gen, classes);
}

std::shared_ptr<engine::Model> make_resnet18(uint64_t seed, int64_t in_channels, int classes) {
  if (in_channels < 1 || classes < 1)
    throw std::invalid_argument("resnet18: in_channels and classes must be >= 1, got " + std::to_string(in_channels) +
                                " and " + std::to_string(classes));
  Generator gen(seed);
  return build_resnet18(gen, in_channels, classes);
}

std::vector<std::string> tensor_parallel_models() {
  std::vector<std::string> out;
  for (const auto& e : registry())
    if (e.gpt) out.emplace_back(e.name);
  return out;
}

int64_t tensor_parallel_max_ranks(const std::string& name) { return find_tensor_parallel(name).gpt->heads; }

std::vector<std::pair<std::string, TensorSplit>> tensor_parallel_plan(const std::string& name) {
  return gpt_tensor_parallel_plan(*find_tensor_parallel(name).gpt);
}

std::shared_ptr<engine::Model> make_model_shard(const std::string& name, const TensorParallelGroup& group) {
  Generator gen(0);  // overwritten: a shard is loaded with its slices of the whole model
  return make_gpt(*find_tensor_parallel(name).gpt, gen, group);
}

int64_t context_parallel_context(const std::string& name) { return find_gpt(name, "context-parallel").gpt->context; }

std::shared_ptr<engine::Model> make_context_parallel_model(const std::string& name, uint64_t seed,
                                                           engine::AttentionRing& ring) {
  Generator gen(seed);
  return make_gpt(*find_gpt(name, "context-parallel").gpt, gen, {}, &ring);
}

const Entry& find_experts(const std::string& name) {
  const Entry& e = find(name);
  if (e.moe) return e;
  std::string known;
  for (const auto& other : registry())
    if (other.moe) known += (known.empty() ? "" : ", ") + std::string(other.name);
  throw std::invalid_argument("model " + name + " has no experts; models that have them: " + known);
}

int64_t model_experts(const std::string& name) { return find_experts(name).moe->experts; }

std::shared_ptr<engine::Model> make_model_experts(const std::string& name, const ExpertGroup& group,
                                                  std::shared_ptr<MoeStats> stats) {
  Generator gen(0);  // overwritten: loaded with the whole model's weights by name
  return make_gpt_moe(gpt_mini(), *find_experts(name).moe, gen, group, std::move(stats));
}

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (const auto& e : registry()) out.emplace_back(e.name);
  return out;
}

void check_model_name(const std::string& name) {
  if (onnx::is_onnx_model(name)) onnx::inspect_model(name.substr(std::strlen(onnx::kPrefix)));
  else find(name);
}

std::string model_task(const std::string& name) {
  if (onnx::is_onnx_model(name)) return model_info(name).task;
  return find(name).task;
}

int64_t parameter_count(const engine::Module& m) {
  int64_t n = 0;
  for (const auto& [name, t] : m.named_parameters()) n += t.numel();
  return n;
}

ModelInfo model_info(const std::string& name) {
  if (onnx::is_onnx_model(name)) {  // an ONNX graph classifies images (workloads/onnx/model.h)
    const onnx::GraphInfo g = onnx::inspect_model(name.substr(std::strlen(onnx::kPrefix)));
    return {name, "imported from ONNX", kImageClassification, g.input_shape, static_cast<int>(g.num_classes),
            g.stages, g.parameters};
  }
  const Entry& e = find(name);
  Generator gen(0);
  const auto model = e.build(gen);
  ModelInfo info;
  info.name = e.name;
  info.description = e.description;
  info.task = e.task;
  info.input_shape = e.input_shape;
  info.num_classes = e.num_classes;
  info.stages = model->stage_names();
  info.parameters = parameter_count(*model);
  return info;
}

std::vector<ModelInfo> model_catalog() {
  std::vector<ModelInfo> out;
  for (const auto& e : registry()) out.push_back(model_info(e.name));
  return out;
}

}  // namespace quartet::workloads

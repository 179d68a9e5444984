#include "workloads/models.h"

#include <functional>
#include <stdexcept>

#include "engine/random.h"

namespace quartet::workloads {
namespace {

using engine::Generator;
using engine::Model;
using engine::Sequential;

engine::ConvOptions padding(int64_t p) {
  engine::ConvOptions o;
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

// Two 3x3 conv blocks (PyTorch's MNIST example, smaller head): 28 -> 32x14x14 -> 64x7x7.
std::shared_ptr<Model> build_cnn(Generator& gen) {
  auto m = std::make_shared<Model>();
  auto conv1 = seq();
  conv1->emplace<engine::Conv2d>(1, 32, 3, padding(1), gen).emplace<engine::ReLU>().emplace<engine::MaxPool>(pool2());
  auto conv2 = seq();
  conv2->emplace<engine::Conv2d>(32, 64, 3, padding(1), gen).emplace<engine::ReLU>().emplace<engine::MaxPool>(pool2());
  auto fc1 = seq();
  fc1->emplace<engine::Flatten>(1).emplace<engine::Linear>(3136, 128, gen).emplace<engine::ReLU>();
  auto fc2 = seq();
  fc2->emplace<engine::Linear>(128, 10, gen);
  m->add_stage("conv1", conv1).add_stage("conv2", conv2).add_stage("fc1", fc1).add_stage("fc2", fc2);
  return m;
}

struct Entry {
  const char* name;
  const char* description;
  std::function<std::shared_ptr<Model>(Generator&)> build;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"mlp", "three fully connected layers 784-256-128-10 with ReLU", build_mlp},
      {"lenet5", "LeNet-5: two 5x5 conv + max-pool blocks (6, 16 channels), then 120-84-10", build_lenet5},
      {"cnn", "two 3x3 conv + max-pool blocks (32, 64 channels), then 128-10", build_cnn},
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

}  // namespace

std::shared_ptr<engine::Model> make_model(const std::string& name, uint64_t seed) {
  const Entry& e = find(name);
  Generator gen(seed);
  return e.build(gen);
}

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (const auto& e : registry()) out.emplace_back(e.name);
  return out;
}

void check_model_name(const std::string& name) { find(name); }

int64_t parameter_count(const engine::Module& m) {
  int64_t n = 0;
  for (const auto& [name, t] : m.named_parameters()) n += t.numel();
  return n;
}

ModelInfo model_info(const std::string& name) {
  const Entry& e = find(name);
  Generator gen(0);
  const auto model = e.build(gen);
  ModelInfo info;
  info.name = e.name;
  info.description = e.description;
  info.input_shape = {1, 28, 28};
  info.num_classes = 10;
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

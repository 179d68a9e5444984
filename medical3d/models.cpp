#include "medical3d/models.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "engine/nn.h"

namespace quartet::medical3d {
namespace {

using engine::Generator;
using engine::Module;
using engine::Sequential;
using engine::Tensor;
using engine::TensorList;

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

// conv-norm-LeakyReLU twice: children 0..5, as PyTorch's nn.Sequential numbers them.
std::shared_ptr<Sequential> conv_block(int64_t in, int64_t out, UNetNorm norm, Generator& gen) {
  auto s = std::make_shared<Sequential>();
  for (int i = 0; i < 2; ++i) {
    s->emplace<engine::Conv3d>(i == 0 ? in : out, out, 3, padding(1), gen, false);
    if (norm == UNetNorm::instance) s->emplace<engine::InstanceNorm>(out, 1e-5f, true);
    else s->emplace<engine::BatchNorm>(out);
    s->emplace<engine::LeakyReLU>(0.01f);
  }
  return s;
}

std::string count_error(const char* stage, size_t want, size_t got, const char* what) {
  return std::string(stage) + " takes " + std::to_string(want) + " tensors (" + what + "), got " +
         std::to_string(got);
}

// {e1..e(k-1)} -> {e1..e(k-1), block(pool(e(k-1)))}: the skips pass through untouched.
class DownStage : public Module {
 public:
  DownStage(size_t inputs, int64_t in, int64_t out, UNetNorm norm, Generator& gen) : inputs_(inputs) {
    pool_ = std::make_shared<engine::MaxPool>(pool2());
    block_ = conv_block(in, out, norm, gen);
    register_module("pool", pool_);
    register_module("block", block_);
  }

  TensorList forward_list(const TensorList& xs) override {
    if (xs.size() != inputs_)
      throw std::invalid_argument(
          count_error("a U-Net encoder stage", inputs_, xs.size(), "the encoder features so far"));
    TensorList out = xs;
    out.push_back(block_->forward(pool_->forward(xs.back())));
    return out;
  }

  Tensor forward(const Tensor&) override {
    throw std::logic_error("a U-Net encoder stage returns {skips..., features}; call forward_list");
  }

 private:
  size_t inputs_;
  std::shared_ptr<engine::MaxPool> pool_;
  std::shared_ptr<Sequential> block_;
};

// {e1..ek, h} -> {e1..e(k-1), block(concat(ek, up(h)))}.
class UpStage : public Module {
 public:
  UpStage(size_t inputs, int64_t below, int64_t out, UNetNorm norm, Generator& gen) : inputs_(inputs) {
    engine::ConvTransposeOptions o;
    o.stride = {2};
    up_ = std::make_shared<engine::ConvTranspose>(below, out, std::vector<int64_t>{2, 2, 2}, o, gen);
    block_ = conv_block(2 * out, out, norm, gen);
    register_module("up", up_);
    register_module("block", block_);
  }

  TensorList forward_list(const TensorList& xs) override {
    if (xs.size() != inputs_)
      throw std::invalid_argument(
          count_error("a U-Net decoder stage", inputs_, xs.size(), "the skips and the path below"));
    TensorList out(xs.begin(), xs.end() - 2);
    const Tensor& skip = xs[xs.size() - 2];
    out.push_back(block_->forward(engine::concat({skip, up_->forward(xs.back())}, 1)));
    return out;
  }

  Tensor forward(const Tensor&) override {
    throw std::logic_error("a U-Net decoder stage takes {skips..., below}; call forward_list");
  }

 private:
  size_t inputs_;
  std::shared_ptr<engine::ConvTranspose> up_;
  std::shared_ptr<Sequential> block_;
};

}  // namespace

UNetNorm parse_unet_norm(const std::string& name) {
  if (name == "instance") return UNetNorm::instance;
  if (name == "batch") return UNetNorm::batch;
  throw std::invalid_argument("unknown norm \"" + name + "\"; expected \"instance\" or \"batch\"");
}

const char* to_string(UNetNorm norm) { return norm == UNetNorm::instance ? "instance" : "batch"; }

std::shared_ptr<engine::Model> make_unet3d(const UNet3dOptions& o, Generator& gen) {
  if (o.depth < 2) throw std::invalid_argument("unet3d: depth must be >= 2, got " + std::to_string(o.depth));
  if (o.base_channels < 1 || o.in_channels < 1 || o.classes < 1)
    throw std::invalid_argument("unet3d: base_channels, in_channels and classes must be >= 1");
  std::vector<int64_t> c(static_cast<size_t>(o.depth) + 1);
  for (int k = 1; k <= o.depth; ++k) c[k] = o.base_channels << (k - 1);
  auto m = std::make_shared<engine::Model>();
  m->add_stage("enc1", conv_block(o.in_channels, c[1], o.norm, gen));
  for (int k = 2; k <= o.depth; ++k)
    m->add_stage(k == o.depth ? "bottleneck" : "enc" + std::to_string(k),
                 std::make_shared<DownStage>(static_cast<size_t>(k - 1), c[k - 1], c[k], o.norm, gen));
  for (int k = o.depth - 1; k >= 1; --k)
    m->add_stage("dec" + std::to_string(k),
                 std::make_shared<UpStage>(static_cast<size_t>(k + 1), c[k + 1], c[k], o.norm, gen));
  auto head = std::make_shared<Sequential>();
  head->emplace<engine::Conv3d>(c[1], o.classes, 1, padding(0), gen);
  m->add_stage("head", head);
  return m;
}

}  // namespace quartet::medical3d

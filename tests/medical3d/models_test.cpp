#include "medical3d/models.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "tests/medical3d/test_dir.h"

namespace quartet::medical3d {
namespace {

using testing::thrown_message;
using Params = std::vector<std::pair<std::string, engine::Shape>>;

engine::Tensor volumes(engine::Shape shape, uint64_t seed = 3) {
  engine::Tensor x = engine::Tensor::empty(shape);
  engine::Generator gen(seed);
  engine::normal_(x, 0.0f, 1.0f, gen);
  return x;
}

Params names_and_shapes(const engine::NamedTensors& tensors) {
  Params out;
  for (const auto& [name, t] : tensors) out.emplace_back(name, t.shape());
  return out;
}

std::shared_ptr<engine::Model> unet(int depth = 3, int64_t base = 4, UNetNorm norm = UNetNorm::instance,
                                    uint64_t seed = 1) {
  engine::Generator gen(seed);
  UNet3dOptions o;
  o.depth = depth;
  o.base_channels = base;
  o.norm = norm;
  return make_unet3d(o, gen);
}

// A conv block's parameters as PyTorch's nn.Sequential(Conv3d(bias=False),
// InstanceNorm3d(affine=True), LeakyReLU, Conv3d, InstanceNorm3d, LeakyReLU) names them.
void block(Params& p, const std::string& prefix, int64_t in, int64_t out) {
  p.push_back({prefix + ".0.weight", {out, in, 3, 3, 3}});
  p.push_back({prefix + ".1.weight", {out}});
  p.push_back({prefix + ".1.bias", {out}});
  p.push_back({prefix + ".3.weight", {out, out, 3, 3, 3}});
  p.push_back({prefix + ".4.weight", {out}});
  p.push_back({prefix + ".4.bias", {out}});
}

TEST(UNet3d, StagesAreTheDocumentedOnes) {
  EXPECT_EQ(unet(3)->stage_names(), (std::vector<std::string>{"enc1", "enc2", "bottleneck", "dec2", "dec1", "head"}));
  EXPECT_EQ(unet(2)->stage_names(), (std::vector<std::string>{"enc1", "bottleneck", "dec1", "head"}));
  EXPECT_EQ(unet(4)->stage_names(), (std::vector<std::string>{"enc1", "enc2", "enc3", "bottleneck", "dec3", "dec2",
                                                              "dec1", "head"}));
}

TEST(UNet3d, ParameterNamesAndShapesMatchThePyTorchDefinition) {
  Params p;
  block(p, "enc1", 1, 4);
  block(p, "enc2.block", 4, 8);
  block(p, "bottleneck.block", 8, 16);
  p.push_back({"dec2.up.weight", {16, 8, 2, 2, 2}});
  p.push_back({"dec2.up.bias", {8}});
  block(p, "dec2.block", 16, 8);
  p.push_back({"dec1.up.weight", {8, 4, 2, 2, 2}});
  p.push_back({"dec1.up.bias", {4}});
  block(p, "dec1.block", 8, 4);
  p.push_back({"head.0.weight", {3, 4, 1, 1, 1}});
  p.push_back({"head.0.bias", {3}});
  const auto model = unet(3, 4);
  EXPECT_EQ(names_and_shapes(model->named_parameters()), p);
  EXPECT_TRUE(model->named_buffers().empty()) << "InstanceNorm keeps no running statistics";
}

TEST(UNet3d, BatchNormVariantAddsRunningStatistics) {
  const auto model = unet(2, 4, UNetNorm::batch);
  const Params buffers = names_and_shapes(model->named_buffers());
  ASSERT_EQ(buffers.size(), 12u);  // 3 blocks x 2 norms x {running_mean, running_var}
  EXPECT_EQ(buffers[0], (std::pair<std::string, engine::Shape>{"enc1.1.running_mean", {4}}));
}

TEST(UNet3d, MapsVolumesToALogitPerClassAndVoxel) {
  engine::NoGradScope no_grad;
  EXPECT_EQ(unet(3, 4)->forward(volumes({2, 1, 8, 12, 16})).shape(), (engine::Shape{2, 3, 8, 12, 16}));
}

// A cut after enc2 sends the first level's skip with the main path; every cut composes
// to the whole model.
TEST(UNet3d, EveryCutSendsTheSkipsAndComposesToTheWholeModel) {
  engine::NoGradScope no_grad;
  const engine::Tensor x = volumes({2, 1, 8, 8, 8});
  const auto model = unet(3, 4);
  const std::vector<float> whole = model->forward(x).to_vector();
  const std::vector<size_t> sent{1, 2, 3, 2, 1};  // tensors crossing the cut before stage 1..5
  for (int cut = 1; cut < model->num_stages(); ++cut) {
    const auto front = model->forward_stages({x}, 0, cut);
    EXPECT_EQ(front.size(), sent[cut - 1]) << "cut before " << model->stage_names()[cut];
    const auto back = model->forward_stages(front, cut, model->num_stages());
    ASSERT_EQ(back.size(), 1u);
    EXPECT_EQ(back[0].to_vector(), whole) << "cut before " << model->stage_names()[cut];
  }
  const auto at_enc2 = model->forward_stages({x}, 0, 2);
  EXPECT_EQ(at_enc2[0].shape(), (engine::Shape{2, 4, 8, 8, 8}));
  EXPECT_EQ(at_enc2[1].shape(), (engine::Shape{2, 8, 4, 4, 4}));
}

TEST(UNet3d, AStageGivenTheWrongNumberOfTensorsSaysWhatItTakes) {
  const auto model = unet(3, 4);
  const engine::Tensor x = volumes({1, 4, 8, 8, 8});
  const std::string msg = thrown_message<std::invalid_argument>([&] { model->forward_stages({x, x, x}, 1, 2); });
  EXPECT_NE(msg.find("takes 1 tensors"), std::string::npos) << msg;
}

TEST(UNet3d, SameSeedSameWeightsOtherSeedOtherWeights) {
  const auto a = unet(3, 4, UNetNorm::instance, 5)->state_dict(), b = unet(3, 4, UNetNorm::instance, 5)->state_dict(),
             c = unet(3, 4, UNetNorm::instance, 6)->state_dict();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;
  EXPECT_NE(a[0].second.to_vector(), c[0].second.to_vector());
}

TEST(UNet3d, BadOptionsAreRefused) {
  EXPECT_NE(thrown_message<std::invalid_argument>([] { unet(1); }).find("depth must be >= 2"), std::string::npos);
  EXPECT_NE(thrown_message<std::invalid_argument>([] { unet(3, 0); }).find("base_channels"), std::string::npos);
  EXPECT_EQ(parse_unet_norm("batch"), UNetNorm::batch);
  EXPECT_NE(thrown_message<std::invalid_argument>([] { parse_unet_norm("layer"); }).find("\"instance\""),
            std::string::npos);
}

// One Adam step on a fixed batch lowers the loss: gradients reach every parameter.
TEST(UNet3d, GradientsReachEveryParameterAndAStepLowersTheLoss) {
  const auto model = unet(3, 4);
  const engine::Tensor x = volumes({2, 1, 8, 8, 8});
  std::vector<int32_t> y(2 * 512);
  for (size_t i = 0; i < y.size(); ++i) y[i] = x.data()[i] > 0.5f ? 2 : x.data()[i] > -0.5f ? 1 : 0;
  auto loss = [&] { return engine::add(engine::soft_dice_loss(model->forward(x), y, false, 1e-5f, true),
                                       engine::cross_entropy(model->forward(x), y, {})); };
  const engine::Tensor l0 = loss();
  l0.backward();
  for (const auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    double s = 0;
    for (float g : p.grad().to_vector()) s += std::abs(g);
    EXPECT_GT(s, 0.0) << name;
  }
  for (auto& p : model->parameters()) {
    float* w = p.data();
    const float* g = p.grad().data();
    for (int64_t i = 0; i < p.numel(); ++i) w[i] -= 0.05f * g[i];
  }
  EXPECT_LT(loss().item(), l0.item());
}

}  // namespace
}  // namespace quartet::medical3d

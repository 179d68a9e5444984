#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/random.h"
#include "workloads/models.h"

namespace quartet::workloads {
namespace {

using Params = std::vector<std::pair<std::string, engine::Shape>>;

// state_dict() of the PyTorch definitions in docs/models.md, in order.
Params pytorch_state_dict(const std::string& model) {
  if (model == "mlp")
    return {{"fc1.1.weight", {256, 784}}, {"fc1.1.bias", {256}}, {"fc2.0.weight", {128, 256}},
            {"fc2.0.bias", {128}},        {"fc3.0.weight", {10, 128}}, {"fc3.0.bias", {10}}};
  if (model == "lenet5")
    return {{"conv1.0.weight", {6, 1, 5, 5}}, {"conv1.0.bias", {6}},     {"conv2.0.weight", {16, 6, 5, 5}},
            {"conv2.0.bias", {16}},          {"fc1.1.weight", {120, 400}}, {"fc1.1.bias", {120}},
            {"fc2.0.weight", {84, 120}},     {"fc2.0.bias", {84}},      {"fc3.0.weight", {10, 84}},
            {"fc3.0.bias", {10}}};
  return {{"conv1.0.weight", {32, 1, 3, 3}}, {"conv1.0.bias", {32}}, {"conv2.0.weight", {64, 32, 3, 3}},
          {"conv2.0.bias", {64}},           {"fc1.1.weight", {128, 3136}}, {"fc1.1.bias", {128}},
          {"fc2.0.weight", {10, 128}},      {"fc2.0.bias", {10}}};
}

engine::Tensor two_images() {
  engine::Tensor x = engine::Tensor::empty({2, 1, 28, 28});
  engine::Generator gen(3);
  engine::normal_(x, 0.0f, 1.0f, gen);
  return x;
}

class EveryModel : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryModel, MapsTwoImagesToTenLogits) {
  const auto model = make_model(GetParam(), 1);
  engine::NoGradScope no_grad;
  EXPECT_EQ(model->forward(two_images()).shape(), (engine::Shape{2, 10}));
}

TEST_P(EveryModel, ParameterNamesAndShapesMatchThePyTorchDefinition) {
  const auto model = make_model(GetParam(), 1);
  Params got;
  for (const auto& [name, t] : model->state_dict()) got.emplace_back(name, t.shape());
  EXPECT_EQ(got, pytorch_state_dict(GetParam()));
}

TEST_P(EveryModel, CatalogCountsEveryParameter) {
  int64_t expected = 0;
  for (const auto& [name, shape] : pytorch_state_dict(GetParam())) expected += engine::shape_numel(shape);
  EXPECT_EQ(model_info(GetParam()).parameters, expected);
}

TEST_P(EveryModel, SameSeedGivesTheSameWeights) {
  const auto a = make_model(GetParam(), 42)->state_dict(), b = make_model(GetParam(), 42)->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;
}

TEST_P(EveryModel, DifferentSeedsGiveDifferentWeights) {
  const auto a = make_model(GetParam(), 1)->state_dict(), b = make_model(GetParam(), 2)->state_dict();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NE(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;
}

TEST_P(EveryModel, StagesComposeToTheWholeModelAtEveryCut) {
  const auto model = make_model(GetParam(), 1);
  engine::NoGradScope no_grad;
  const engine::Tensor x = two_images();
  const auto whole = model->forward(x).to_vector();
  for (int cut = 1; cut < model->num_stages(); ++cut) {
    const auto front = model->forward_stages({x}, 0, cut);
    const auto back = model->forward_stages(front, cut, model->num_stages());
    ASSERT_EQ(back.size(), 1u);
    EXPECT_EQ(back[0].to_vector(), whole) << "cut before " << model->stage_names()[cut];
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EveryModel, ::testing::Values("mlp", "lenet5", "cnn"));

TEST(Models, StageNamesAreTheDocumentedOnes) {
  EXPECT_EQ(make_model("mlp", 0)->stage_names(), (std::vector<std::string>{"fc1", "fc2", "fc3"}));
  EXPECT_EQ(make_model("lenet5", 0)->stage_names(),
            (std::vector<std::string>{"conv1", "conv2", "fc1", "fc2", "fc3"}));
  EXPECT_EQ(make_model("cnn", 0)->stage_names(), (std::vector<std::string>{"conv1", "conv2", "fc1", "fc2"}));
}

TEST(Models, CnnHas421642Parameters) {
  EXPECT_EQ(parameter_count(*make_model("cnn", 0)), 421642);
  EXPECT_EQ(parameter_count(*make_model("lenet5", 0)), 61706);
  EXPECT_EQ(parameter_count(*make_model("mlp", 0)), 235146);
}

TEST(Models, CatalogListsEveryModelWithItsStagesAndInputShape) {
  const auto catalog = model_catalog();
  ASSERT_EQ(catalog.size(), 3u);
  for (const ModelInfo& info : catalog) {
    EXPECT_EQ(info.stages, make_model(info.name, 0)->stage_names());
    EXPECT_EQ(info.input_shape, (engine::Shape{1, 28, 28}));
    EXPECT_FALSE(info.description.empty());
  }
}

TEST(Models, InitialisationFollowsPyTorchsUniformBound) {
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)): fan_in of conv2 in cnn is 32*3*3 = 288.
  const auto model = make_model("cnn", 1);
  for (const auto& [name, t] : model->named_parameters())
    if (name == "conv2.0.weight")
      for (float v : t.to_vector()) EXPECT_LE(std::abs(v), 1.0f / std::sqrt(288.0f));
}

TEST(Models, UnknownModelListsTheKnownOnes) {
  try {
    make_model("resnet-huge", 1);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown model \"resnet-huge\"; known models: mlp, lenet5, cnn");
  }
}

}  // namespace
}  // namespace quartet::workloads

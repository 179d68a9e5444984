#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "engine/safetensors.h"
#include "workloads/models.h"

namespace quartet::workloads {
namespace {

using Params = std::vector<std::pair<std::string, engine::Shape>>;

// named_parameters() of the PyTorch definitions in docs/models.md, in order.
Params pytorch_parameters(const std::string& model) {
  if (model == "mlp")
    return {{"fc1.1.weight", {256, 784}}, {"fc1.1.bias", {256}}, {"fc2.0.weight", {128, 256}},
            {"fc2.0.bias", {128}},        {"fc3.0.weight", {10, 128}}, {"fc3.0.bias", {10}}};
  if (model == "lenet5")
    return {{"conv1.0.weight", {6, 1, 5, 5}}, {"conv1.0.bias", {6}},     {"conv2.0.weight", {16, 6, 5, 5}},
            {"conv2.0.bias", {16}},          {"fc1.1.weight", {120, 400}}, {"fc1.1.bias", {120}},
            {"fc2.0.weight", {84, 120}},     {"fc2.0.bias", {84}},      {"fc3.0.weight", {10, 84}},
            {"fc3.0.bias", {10}}};
  if (model == "cnn")
    return {{"conv1.0.weight", {32, 1, 3, 3}}, {"conv1.0.bias", {32}}, {"conv2.0.weight", {64, 32, 3, 3}},
            {"conv2.0.bias", {64}},           {"fc1.1.weight", {128, 3136}}, {"fc1.1.bias", {128}},
            {"fc2.0.weight", {10, 128}},      {"fc2.0.bias", {10}}};
  if (model == "cnn-wide")
    return {{"conv1.0.weight", {32, 1, 3, 3}}, {"conv1.0.bias", {32}}, {"conv2.0.weight", {64, 32, 3, 3}},
            {"conv2.0.bias", {64}},           {"fc1.1.weight", {2048, 3136}}, {"fc1.1.bias", {2048}},
            {"fc2.0.weight", {10, 2048}},     {"fc2.0.bias", {10}}};
  return {{"stem.0.weight", {16, 1, 3, 3}},
          {"stem.1.weight", {16}},
          {"stem.1.bias", {16}},
          {"layer1a.conv1.weight", {16, 16, 3, 3}},
          {"layer1a.bn1.weight", {16}},
          {"layer1a.bn1.bias", {16}},
          {"layer1b.conv2.weight", {16, 16, 3, 3}},
          {"layer1b.bn2.weight", {16}},
          {"layer1b.bn2.bias", {16}},
          {"layer2a.conv1.weight", {32, 16, 3, 3}},
          {"layer2a.bn1.weight", {32}},
          {"layer2a.bn1.bias", {32}},
          {"layer2a.shortcut.0.weight", {32, 16, 1, 1}},
          {"layer2a.shortcut.1.weight", {32}},
          {"layer2a.shortcut.1.bias", {32}},
          {"layer2b.conv2.weight", {32, 32, 3, 3}},
          {"layer2b.bn2.weight", {32}},
          {"layer2b.bn2.bias", {32}},
          {"layer3a.conv1.weight", {64, 32, 3, 3}},
          {"layer3a.bn1.weight", {64}},
          {"layer3a.bn1.bias", {64}},
          {"layer3a.shortcut.0.weight", {64, 32, 1, 1}},
          {"layer3a.shortcut.1.weight", {64}},
          {"layer3a.shortcut.1.bias", {64}},
          {"layer3b.conv2.weight", {64, 64, 3, 3}},
          {"layer3b.bn2.weight", {64}},
          {"layer3b.bn2.bias", {64}},
          {"head.2.weight", {10, 64}},
          {"head.2.bias", {10}}};
}

// named_buffers() of the same definitions, in order, less BatchNorm's
// num_batches_tracked, which Quartet does not keep.
Params pytorch_buffers(const std::string& model) {
  if (model != "resnet-mini") return {};
  Params out;
  for (const auto& [bn, c] : std::vector<std::pair<std::string, int64_t>>{{"stem.1", 16},
                                                                       {"layer1a.bn1", 16},
                                                                       {"layer1b.bn2", 16},
                                                                       {"layer2a.bn1", 32},
                                                                       {"layer2a.shortcut.1", 32},
                                                                       {"layer2b.bn2", 32},
                                                                       {"layer3a.bn1", 64},
                                                                       {"layer3a.shortcut.1", 64},
                                                                       {"layer3b.bn2", 64}}) {
    out.emplace_back(bn + ".running_mean", engine::Shape{c});
    out.emplace_back(bn + ".running_var", engine::Shape{c});
  }
  return out;
}

Params names_and_shapes(const engine::NamedTensors& tensors) {
  Params out;
  for (const auto& [name, t] : tensors) out.emplace_back(name, t.shape());
  return out;
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
  EXPECT_EQ(names_and_shapes(make_model(GetParam(), 1)->named_parameters()), pytorch_parameters(GetParam()));
}

TEST_P(EveryModel, BufferNamesAndShapesMatchThePyTorchDefinition) {
  EXPECT_EQ(names_and_shapes(make_model(GetParam(), 1)->named_buffers()), pytorch_buffers(GetParam()));
}

// PyTorch interleaves each module's parameters and buffers; Quartet lists all parameters,
// then all buffers. Safetensors and load_state_dict match by name, so the two orders
// load alike.
TEST_P(EveryModel, StateDictIsTheParametersThenTheBuffers) {
  Params expected = pytorch_parameters(GetParam());
  for (auto& b : pytorch_buffers(GetParam())) expected.push_back(b);
  EXPECT_EQ(names_and_shapes(make_model(GetParam(), 1)->state_dict()), expected);
}

TEST_P(EveryModel, CatalogCountsEveryParameter) {
  int64_t expected = 0;
  for (const auto& [name, shape] : pytorch_parameters(GetParam())) expected += engine::shape_numel(shape);
  EXPECT_EQ(model_info(GetParam()).parameters, expected);
}

TEST_P(EveryModel, SameSeedGivesTheSameWeights) {
  const auto a = make_model(GetParam(), 42)->state_dict(), b = make_model(GetParam(), 42)->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;
}

// Randomly initialised tensors differ; constant ones (BatchNorm's ones and zeros) do not.
TEST_P(EveryModel, DifferentSeedsGiveDifferentWeights) {
  const auto a = make_model(GetParam(), 1)->state_dict(), b = make_model(GetParam(), 2)->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const auto va = a[i].second.to_vector(), vb = b[i].second.to_vector();
    const bool constant = std::all_of(va.begin(), va.end(), [&](float v) { return v == va[0]; });
    if (constant)
      EXPECT_EQ(va, vb) << a[i].first;
    else
      EXPECT_NE(va, vb) << a[i].first;
  }
}

// Each cut runs on a fresh model of the same seed: in training mode every forward updates
// BatchNorm's running statistics, so the halves must start from the state the whole model
// started from, and must leave the same state behind. In eval mode the models first take
// one training forward, so the running statistics they use are not the initial 0 and 1.
void expect_every_cut_composes(const std::string& name, bool training) {
  const engine::Tensor x = two_images();
  engine::NoGradScope no_grad;
  const auto fresh = [&] {
    auto m = make_model(name, 1);
    if (!training) {
      m->forward(x);
      m->eval();
    }
    return m;
  };
  const auto reference = fresh();
  const auto whole = reference->forward(x).to_vector();
  const auto state = reference->state_dict();
  for (int cut = 1; cut < reference->num_stages(); ++cut) {
    const auto model = fresh();
    const auto front = model->forward_stages({x}, 0, cut);
    const auto back = model->forward_stages(front, cut, model->num_stages());
    const std::string where = "cut before " + model->stage_names()[cut];
    ASSERT_EQ(back.size(), 1u) << where;
    EXPECT_EQ(back[0].to_vector(), whole) << where;
    const auto after = model->state_dict();
    for (size_t i = 0; i < state.size(); ++i)
      EXPECT_EQ(after[i].second.to_vector(), state[i].second.to_vector()) << where << ": " << after[i].first;
  }
}

TEST_P(EveryModel, StagesComposeToTheWholeModelAtEveryCutInTraining) { expect_every_cut_composes(GetParam(), true); }

TEST_P(EveryModel, StagesComposeToTheWholeModelAtEveryCutInEval) { expect_every_cut_composes(GetParam(), false); }

// The 2D models; the 3D ones have their own tests (tests/workloads/models3d_test.cpp).
std::vector<std::string> image_model_names() {
  std::vector<std::string> out;
  for (const auto& m : model_names())
    if (model_task(m) == kImageClassification) out.push_back(m);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, EveryModel, ::testing::ValuesIn(image_model_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string name = p.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST(Models, ModelNamesAreTheDocumentedOnes) {
  EXPECT_EQ(model_names(),
            (std::vector<std::string>{"mlp", "lenet5", "cnn", "resnet-mini", "cnn-wide", "unet3d", "gpt-mini", "gpt-moe",
                                      "gpt-moe-dropless"}));
}

TEST(Models, StageNamesAreTheDocumentedOnes) {
  EXPECT_EQ(make_model("mlp", 0)->stage_names(), (std::vector<std::string>{"fc1", "fc2", "fc3"}));
  EXPECT_EQ(make_model("lenet5", 0)->stage_names(),
            (std::vector<std::string>{"conv1", "conv2", "fc1", "fc2", "fc3"}));
  EXPECT_EQ(make_model("cnn", 0)->stage_names(), (std::vector<std::string>{"conv1", "conv2", "fc1", "fc2"}));
  EXPECT_EQ(make_model("resnet-mini", 0)->stage_names(),
            (std::vector<std::string>{"stem", "layer1a", "layer1b", "layer2a", "layer2b", "layer3a", "layer3b",
                                      "head"}));
  EXPECT_EQ(make_model("cnn-wide", 0)->stage_names(), (std::vector<std::string>{"conv1", "conv2", "fc1", "fc2"}));
}

TEST(Models, ParameterCountsAreTheDocumentedOnes) {
  EXPECT_EQ(parameter_count(*make_model("cnn", 0)), 421642);
  EXPECT_EQ(parameter_count(*make_model("lenet5", 0)), 61706);
  EXPECT_EQ(parameter_count(*make_model("mlp", 0)), 235146);
  EXPECT_EQ(parameter_count(*make_model("resnet-mini", 0)), 77754);
  EXPECT_EQ(parameter_count(*make_model("cnn-wide", 0)), 6463882);
}

// torchvision's resnet18(num_classes=10) has 11,181,642 parameters; a grey stem conv
// has 2 x 64 x 7 x 7 fewer.
TEST(Models, ResNet18HasTorchvisionsParameterCount) {
  EXPECT_EQ(parameter_count(*make_resnet18(0)), 11181642);
  EXPECT_EQ(parameter_count(*make_resnet18(0, 1, 10)), 11181642 - 2 * 64 * 7 * 7);
}

TEST(Models, ResNet18MapsCifarSizedImagesToLogitsThroughEighteenStages) {
  const auto model = make_resnet18(3);
  ASSERT_EQ(model->num_stages(), 18);
  EXPECT_EQ(model->stage_names().front(), "stem");
  EXPECT_EQ(model->stage_names()[1], "layer1_0a");
  EXPECT_EQ(model->stage_names().back(), "head");
  engine::NoGradScope no_grad;
  engine::Tensor x = engine::Tensor::empty({2, 3, 32, 32});
  engine::Generator gen(1);
  engine::normal_(x, 0.0f, 1.0f, gen);
  EXPECT_EQ(model->forward(x).shape(), (engine::Shape{2, 10}));
  EXPECT_THROW(make_resnet18(0, 0, 10), std::invalid_argument);
}

// cnn-wide keeps cnn's client side: the same conv blocks, so a cut after conv2 sends the
// same 64x7x7 tensor and hands over the same client half, from the same seed.
TEST(Models, CnnWideSharesCnnsConvBlocksAndItsCut) {
  const auto cnn = make_model("cnn", 5), wide = make_model("cnn-wide", 5);
  for (const char* name : {"conv1.0.weight", "conv1.0.bias", "conv2.0.weight", "conv2.0.bias"}) {
    const auto find = [&](const engine::Model& m) {
      for (const auto& [n, t] : m.named_parameters())
        if (n == name) return t.to_vector();
      return std::vector<float>{};
    };
    EXPECT_EQ(find(*cnn), find(*wide)) << name;
  }
  engine::NoGradScope no_grad;
  const engine::Tensor x = two_images();
  const engine::TensorList a = cnn->forward_stages({x}, 0, 2), b = wide->forward_stages({x}, 0, 2);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].shape(), (engine::Shape{2, 64, 7, 7}));
  EXPECT_EQ(a[0].to_vector(), b[0].to_vector());
}

TEST(Models, CatalogListsEveryModelWithItsStagesAndInputShape) {
  const auto catalog = model_catalog();
  ASSERT_EQ(catalog.size(), model_names().size());
  for (const ModelInfo& info : catalog) {
    EXPECT_EQ(info.stages, make_model(info.name, 0)->stage_names());
    const engine::Shape expected = info.task == kImageClassification ? engine::Shape{1, 28, 28}
                                   : info.task == kLanguageModel     ? engine::Shape{128}
                                                                     : engine::Shape{1, 32, 32, 32};
    EXPECT_EQ(info.input_shape, expected);
    EXPECT_FALSE(info.description.empty());
  }
}

TEST(Models, InitialisationFollowsPyTorchsUniformBound) {
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)): fan_in of conv2 in cnn is 32*3*3 = 288.
  const auto model = make_model("cnn", 1);
  for (const auto& [name, t] : model->named_parameters()) {
    if (name != "conv2.0.weight") continue;
    for (float v : t.to_vector()) EXPECT_LE(std::abs(v), 1.0f / std::sqrt(288.0f));
  }
}

// PyTorch's BatchNorm2d init: weight 1, bias 0, running_mean 0, running_var 1.
TEST(ResnetMini, BatchNormStartsAtPyTorchsInitialValues) {
  for (const auto& [name, t] : make_model("resnet-mini", 7)->state_dict()) {
    if (t.dim() != 1 || name.starts_with("head.")) continue;
    const bool ones = name.ends_with(".weight") || name.ends_with(".running_var");
    for (float v : t.to_vector()) ASSERT_EQ(v, ones ? 1.0f : 0.0f) << name;
  }
}

// The running statistics travel with the weights: after a training forward has moved
// them, a model of another seed loaded from the file computes the same eval logits.
TEST(ResnetMini, SafetensorsCarryTheRunningStatistics) {
  const engine::Tensor x = two_images();
  engine::NoGradScope no_grad;
  const auto trained = make_model("resnet-mini", 1);
  trained->forward(x);
  trained->eval();
  const auto expected = trained->forward(x).to_vector();
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("resnet_mini_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  engine::save_safetensors(path, trained->state_dict());
  const auto loaded = make_model("resnet-mini", 2);
  engine::load_state_dict(*loaded, path);
  std::filesystem::remove(path);
  loaded->eval();
  EXPECT_EQ(loaded->forward(x).to_vector(), expected);
}

TEST(ResnetMini, CutInsideABlockSendsTheMainAndTheSkipTensors) {
  const auto model = make_model("resnet-mini", 1);
  engine::NoGradScope no_grad;
  const engine::Tensor x = two_images();
  const int inside = model->stage_index("layer2b"), between = model->stage_index("layer2a");
  const auto two = model->forward_stages({x}, 0, inside);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].shape(), (engine::Shape{2, 32, 14, 14}));  // main: relu(bn1(conv1(x)))
  EXPECT_EQ(two[1].shape(), (engine::Shape{2, 32, 14, 14}));  // skip: the projection of x
  EXPECT_EQ(model->forward_stages({x}, 0, between).size(), 1u);
  EXPECT_EQ(model->forward_stages({x}, 0, model->stage_index("layer1b")).size(), 2u);
  EXPECT_EQ(model->forward_stages({x}, 0, model->stage_index("layer3b")).size(), 2u);
}

TEST(ResnetMini, IdentityBlockSendsItsInputAsTheSkip) {
  const auto model = make_model("resnet-mini", 1);
  engine::NoGradScope no_grad;
  const auto stem = model->forward_stages({two_images()}, 0, 1);
  const auto fork = model->forward_stages(stem, 1, 2);
  ASSERT_EQ(fork.size(), 2u);
  EXPECT_EQ(fork[1].to_vector(), stem[0].to_vector());
}

TEST(ResnetMini, BlockHalvesRefuseTheWrongNumberOfTensors) {
  const auto model = make_model("resnet-mini", 1);
  engine::NoGradScope no_grad;
  const engine::Tensor h = engine::Tensor::zeros({2, 16, 28, 28});
  EXPECT_THROW(model->stage(model->stage_index("layer1a")).forward_list({h, h}), std::invalid_argument);
  EXPECT_THROW(model->stage(model->stage_index("layer1b")).forward_list({h}), std::invalid_argument);
  EXPECT_THROW(model->stage(model->stage_index("layer1b")).forward(h), std::logic_error);
}

// Split learning at a cut inside a block: the server back-propagates to both tensors it
// received, the client back-propagates both gradients at once (one scalar,
// sum(main * g_main) + sum(skip * g_skip), since the two share the client's graph). The
// gradients must be the whole model's.
TEST(ResnetMini, GradientsThroughBothCutTensorsEqualTheWholeModels) {
  const engine::Tensor x = two_images();
  const std::vector<int32_t> y = {3, 7};
  const auto whole = make_model("resnet-mini", 1);
  engine::cross_entropy(whole->forward(x), y).backward();

  const auto split = make_model("resnet-mini", 1);
  const int cut = split->stage_index("layer2b");
  const auto sent = split->forward_stages({x}, 0, cut);
  engine::TensorList received;
  for (const auto& t : sent) received.push_back(t.detach().set_requires_grad(true));
  engine::cross_entropy(split->forward_stages(received, cut, split->num_stages())[0], y).backward();
  engine::Tensor surrogate;
  for (size_t i = 0; i < sent.size(); ++i) {
    ASSERT_TRUE(received[i].grad().defined()) << "tensor " << i;
    const engine::Tensor term = engine::sum(engine::mul(sent[i], received[i].grad()));
    surrogate = surrogate.defined() ? engine::add(surrogate, term) : term;
  }
  surrogate.backward();

  const auto a = whole->named_parameters(), b = split->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const auto ga = a[i].second.grad().to_vector(), gb = b[i].second.grad().to_vector();
    ASSERT_EQ(ga.size(), gb.size()) << a[i].first;
    for (size_t j = 0; j < ga.size(); ++j)
      ASSERT_NEAR(ga[j], gb[j], 1e-5f + 1e-4f * std::abs(ga[j])) << a[i].first << "[" << j << "]";
  }
}

TEST(Models, UnknownModelListsTheKnownOnes) {
  try {
    make_model("resnet-huge", 1);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown model \"resnet-huge\"; known models: mlp, lenet5, cnn, resnet-mini, cnn-wide, unet3d, "
                 "gpt-mini, gpt-moe, gpt-moe-dropless");
  }
}

}  // namespace
}  // namespace quartet::workloads

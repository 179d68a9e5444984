#include "analysis/plan/model_shape.h"

#include <gtest/gtest.h>

namespace quartet::analysis::plan {
namespace {

// `python3 bench/flops.py mlp lenet5 cnn conv3d-32 conv3d-64 unet3d-32 unet3d-64
// unet3d-128 gpt-mini` prints these: "model forward train".
struct ScriptLine {
  const char* model;
  double forward;
  double train;
};
constexpr ScriptLine kFlopsPy[] = {
    {"mlp", 469504, 1007104},
    {"lenet5", 833040, 2263920},
    {"cnn", 8482304, 24995328},
    {"conv3d-32", 934281344, 2774532480},
    {"conv3d-64", 7474249856, 22196257152},
    {"unet3d-32", 3082813440, 9220128768},
    {"unet3d-64", 24662507520, 73761030144},
    {"unet3d-128", 197300060160, 590088241152},
    {"gpt-mini", 226623488, 679870464},
};

TEST(ModelShape, FlopsAreTheScriptsForEveryModelItCounts) {
  for (const ScriptLine& line : kFlopsPy) {
    const ModelShape m = model_shape(line.model);
    EXPECT_DOUBLE_EQ(forward_flops(m), line.forward) << line.model;
    EXPECT_DOUBLE_EQ(train_flops(m), line.train) << line.model;
  }
}

// `quartet list models` prints these parameter counts, made by the engine's modules.
TEST(ModelShape, ParametersAreTheEnginesModels) {
  EXPECT_DOUBLE_EQ(parameter_count(model_shape("mlp")), 235146);
  EXPECT_DOUBLE_EQ(parameter_count(model_shape("lenet5")), 61706);
  EXPECT_DOUBLE_EQ(parameter_count(model_shape("cnn")), 421642);
  EXPECT_DOUBLE_EQ(parameter_count(model_shape("unet3d")), 339603);
  EXPECT_DOUBLE_EQ(parameter_count(model_shape("gpt-mini")), 875520);
  EXPECT_DOUBLE_EQ(parameter_count(model_shape("gpt-moe")), 1666816);
  EXPECT_DOUBLE_EQ(parameter_count(model_shape("gpt-moe-dropless")), 1666816);
}

// gpt-moe: blocks 1 and 3 route each token to 2 of 4 experts, each gpt-mini's MLP; the
// router adds a 128 → 4 product. FLOPs are gpt-mini's with those MLPs run twice a token.
TEST(ModelShape, MixtureOfExpertsRunsTopKExpertsAToken) {
  const ModelShape mini = model_shape("gpt-mini"), moe = model_shape("gpt-moe");
  const double T = 128, w = 128;
  const double mlp = 2 * (w * 4 * w + 4 * w * w) * T;  // fc1 and fc2 of one block, a sample
  const double router = 2 * w * 4 * T;
  EXPECT_DOUBLE_EQ(forward_flops(moe), forward_flops(mini) + 2 * (mlp + router));
  EXPECT_EQ(moe.stages, mini.stages);
  int experts = 0;
  for (const Layer& l : moe.layers) experts += l.expert;
  EXPECT_EQ(experts, 4);  // up and down of blocks 1 and 3
}

TEST(ModelShape, StagesAreTheWorkloadsStageNames) {
  EXPECT_EQ(model_shape("cnn").stages, (std::vector<std::string>{"conv1", "conv2", "fc1", "fc2"}));
  EXPECT_EQ(model_shape("unet3d").stages,
            (std::vector<std::string>{"enc1", "enc2", "bottleneck", "dec2", "dec1", "head"}));
  EXPECT_EQ(model_shape("gpt-mini").stages,
            (std::vector<std::string>{"embed", "block0", "block1", "block2", "block3", "head"}));
}

// Narayanan et al. (SC'21, §5.1) count a step of a GPT with activation recomputation as
// 96 B s l h^2 (1 + s / 6h + V / 16 l h) FLOPs: four passes over the blocks (forward,
// recomputed forward, backward's two) and three over the logits. Without recomputation,
// attention's products over the whole square as Megatron's kernels compute them:
// 72 B s l h^2 (1 + s / 6h + V / 12 l h). Left out by the paper: biases; so within 0.5 %.
TEST(ModelShape, GptFamilyMatchesThePapersFlopCount) {
  for (const std::string& name : gpt_family_names()) {
    const ModelShape m = model_shape(name);
    const double s = 2048, l = static_cast<double>(m.gpt->layers), h = static_cast<double>(m.gpt->width),
                 V = 51200;
    const double paper = 72 * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    EXPECT_NEAR(train_flops(m) / paper, 1.0, 0.005) << name;
  }
}

TEST(ModelShape, GptFamilyParametersAreThePapers) {
  // Table 1's parameter counts in billions.
  const std::vector<double> billions = {1.7, 3.6, 7.5, 18.4, 39.1, 76.1, 145.6, 310.1, 529.6, 1008.0};
  const std::vector<std::string> names = gpt_family_names();
  ASSERT_EQ(names.size(), billions.size());
  for (size_t i = 0; i < names.size(); ++i)
    EXPECT_NEAR(parameter_count(model_shape(names[i])) / 1e9 / billions[i], 1.0, 0.03) << names[i];
}

TEST(ModelShapeHostile, UnknownModelNamesTheKnownOnes) {
  try {
    model_shape("vgg");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model vgg: the planner has no shape for it; it describes mlp, lenet5"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace quartet::analysis::plan

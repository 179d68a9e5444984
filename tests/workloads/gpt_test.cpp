// gpt-mini: the parameters of the PyTorch definition in docs/models.md, what it maps, that
// it is causal, and the tensor-parallel plan that names every parameter once.

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/random.h"
#include "workloads/models.h"

namespace quartet::workloads {
namespace {

using Params = std::vector<std::pair<std::string, engine::Shape>>;

// named_parameters() of docs/models.md's GptMini, in order.
Params pytorch_parameters() {
  Params p{{"embed.token.weight", {256, 128}}, {"embed.position.weight", {128, 128}}};
  for (int i = 0; i < 4; ++i) {
    const std::string b = "block" + std::to_string(i) + ".";
    p.insert(p.end(), {{b + "ln1.weight", {128}},
                       {b + "ln1.bias", {128}},
                       {b + "attn.query.weight", {128, 128}},
                       {b + "attn.query.bias", {128}},
                       {b + "attn.key.weight", {128, 128}},
                       {b + "attn.key.bias", {128}},
                       {b + "attn.value.weight", {128, 128}},
                       {b + "attn.value.bias", {128}},
                       {b + "attn.out.weight", {128, 128}},
                       {b + "attn.out.bias", {128}},
                       {b + "ln2.weight", {128}},
                       {b + "ln2.bias", {128}},
                       {b + "mlp.up.weight", {512, 128}},
                       {b + "mlp.up.bias", {512}},
                       {b + "mlp.down.weight", {128, 512}},
                       {b + "mlp.down.bias", {128}}});
  }
  p.insert(p.end(), {{"head.ln.weight", {128}}, {"head.ln.bias", {128}}, {"head.out.weight", {256, 128}},
                     {"head.out.bias", {256}}});
  return p;
}

engine::Tensor bytes(const std::vector<float>& values, int64_t n, int64_t t) {
  return engine::Tensor::from_vector({n, t}, values);
}

TEST(GptMini, ParametersMatchThePyTorchDefinition) {
  Params ours;
  for (const auto& [name, t] : make_model("gpt-mini", 1)->named_parameters()) ours.emplace_back(name, t.shape());
  EXPECT_EQ(ours, pytorch_parameters());
  EXPECT_EQ(model_info("gpt-mini").parameters, 875520);
  EXPECT_EQ(model_info("gpt-mini").task, kLanguageModel);
}

TEST(GptMini, MapsBytesToALogitRowPerPositionAndStagesAreItsBlocks) {
  const auto model = make_model("gpt-mini", 1);
  EXPECT_EQ(model->stage_names(),
            (std::vector<std::string>{"embed", "block0", "block1", "block2", "block3", "head"}));
  engine::NoGradScope no_grad;
  std::vector<float> x(2 * 5);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 256);
  EXPECT_EQ(model->forward(bytes(x, 2, 5)).shape(), (engine::Shape{10, 256}));
}

// Position t's logits depend on bytes 0..t only: changing the last byte leaves the others.
TEST(GptMini, IsCausal) {
  const auto model = make_model("gpt-mini", 2);
  engine::NoGradScope no_grad;
  std::vector<float> x{72, 101, 108, 108, 111, 33};
  const std::vector<float> a = model->forward(bytes(x, 1, 6)).to_vector();
  x.back() = 63;
  const std::vector<float> b = model->forward(bytes(x, 1, 6)).to_vector();
  EXPECT_EQ(std::vector<float>(a.begin(), a.end() - 256), std::vector<float>(b.begin(), b.end() - 256));
  EXPECT_NE(std::vector<float>(a.end() - 256, a.end()), std::vector<float>(b.end() - 256, b.end()));
}

TEST(GptMini, MoreBytesThanItsContextAreRefused) {
  const auto model = make_model("gpt-mini", 1);
  engine::NoGradScope no_grad;
  try {
    model->forward(engine::Tensor::zeros({1, 129}));
    FAIL() << "129 positions were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("1 <= T <= 128"), std::string::npos) << e.what();
  }
}

TEST(GptMini, TheTensorParallelPlanNamesEveryParameterOnceInOrder) {
  const auto plan = tensor_parallel_plan("gpt-mini");
  const auto params = make_model("gpt-mini", 1)->named_parameters();
  ASSERT_EQ(plan.size(), params.size());
  for (size_t i = 0; i < plan.size(); ++i) EXPECT_EQ(plan[i].first, params[i].first);
  EXPECT_EQ(tensor_parallel_max_ranks("gpt-mini"), 4);
  EXPECT_EQ(tensor_parallel_models(), std::vector<std::string>{"gpt-mini"});
}

// A shard holds its slice's shapes: rows of the column-parallel layers, columns of the
// row-parallel ones, and the row-parallel biases on rank 0 only.
TEST(GptMini, AShardHoldsItsSliceOfEachSplitParameter) {
  struct NoGroup final : engine::StatsReducer {
    void all_reduce_sum(engine::Tensor&) override {}
  } sum;
  for (int rank : {0, 1}) {
    std::map<std::string, engine::Shape> shapes;
    for (const auto& [name, t] : make_model_shard("gpt-mini", {rank, 2, &sum})->named_parameters())
      shapes[name] = t.shape();
    EXPECT_EQ(shapes.at("block0.attn.query.weight"), (engine::Shape{64, 128}));
    EXPECT_EQ(shapes.at("block0.mlp.up.weight"), (engine::Shape{256, 128}));
    EXPECT_EQ(shapes.at("block0.mlp.down.weight"), (engine::Shape{128, 256}));
    EXPECT_EQ(shapes.at("head.out.weight"), (engine::Shape{256, 128}));
    EXPECT_EQ(shapes.count("block3.attn.out.bias"), rank == 0 ? 1u : 0u);
  }
}

TEST(GptMini, AGroupThatDoesNotDivideTheHeadsIsRefused) {
  struct NoGroup final : engine::StatsReducer {
    void all_reduce_sum(engine::Tensor&) override {}
  } sum;
  EXPECT_THROW(make_model_shard("gpt-mini", {0, 3, &sum}), std::invalid_argument);
  EXPECT_THROW(tensor_parallel_plan("cnn"), std::invalid_argument);
}

}  // namespace
}  // namespace quartet::workloads

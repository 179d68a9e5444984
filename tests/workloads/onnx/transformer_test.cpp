// A transformer imported from ONNX: the tiny ViT of tests/data/onnx/ (exported from
// PyTorch by make_fixtures.py: Shape chains, Gather, Expand, LayerNormalization, batched
// MatMul) against what PyTorch computed on it at every batch size, its stages, and the
// integer nodes folded at import or run on the shapes at hand.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "tests/temp_folder.h"
#include "tests/workloads/onnx/expected.h"
#include "workloads/onnx/model.h"
#include "workloads/onnx/program.h"

namespace quartet::workloads::onnx {
namespace {

using engine::Tensor;

const std::string kTinyVit = std::string(QUARTET_TEST_DATA_DIR) + "/onnx/tiny_vit.onnx";

std::map<std::string, Tensor> expected() { return testing::expected("tiny_vit_expected.pb"); }
using testing::max_rel_diff;

TEST(OnnxTransformer, TinyVitForwardEqualsPyTorchAtEveryBatchSize) {
  auto e = expected();
  auto model = import_model(kTinyVit, 1);
  model->eval();
  EXPECT_LT(max_rel_diff(model->forward(e["input"]), e["logits"]), 1e-5);
  // Exported at batch 1, run at 4, 1 and 3: the reshapes follow the batch at hand.
  for (int64_t begin : {0, 1}) {
    const int64_t n = begin == 0 ? 1 : 3;
    const Tensor part = model->forward(engine::narrow(e["input"], 0, begin, n));
    EXPECT_LT(max_rel_diff(part, engine::narrow(e["logits"], 0, begin, n)), 1e-5) << "batch " << n;
  }
}

TEST(OnnxTransformer, TinyVitOneSgdStepEqualsPyTorch) {
  auto e = expected();
  auto model = import_model(kTinyVit, 1);
  // patch_embed, cls_token, pos_embed, 2 blocks of 12, norm, head.
  EXPECT_EQ(testing::expect_one_sgd_step(*model, e), 2 + 1 + 1 + 2 * 12 + 2 + 2);
}

TEST(OnnxTransformer, TinyVitIsCutBetweenBlocksWhereTheResidualStreamAloneCrosses) {
  const GraphInfo info = inspect_model(kTinyVit);
  // Each residual Add closes a stage: the stream alone crosses there (pre-norm blocks:
  // after the attention and after the MLP). The class token's Shape chain stays inside.
  EXPECT_EQ(info.stages,
            (std::vector<std::string>{"patch_embed_Conv", "Reshape", "Transpose", "Concat_2", "Add",
                                      "blocks_blocks_0_Add", "blocks_blocks_0_Add_1", "blocks_blocks_1_Add",
                                      "blocks_blocks_1_Add_1", "norm_LayerNormalization", "Gather_1", "head_Gemm"}));
  EXPECT_EQ(info.input_shape, (engine::Shape{1, 28, 28}));
  EXPECT_EQ(info.num_classes, 10);
  auto model = import_model(kTinyVit, 1);
  auto e = expected();
  model->eval();
  const engine::TensorList front = model->forward_stages({e["input"]}, 0, 7);
  const engine::TensorList back = model->forward_stages(front, 7, model->num_stages());
  EXPECT_LT(max_rel_diff(back.at(0), e["logits"]), 1e-5);
}

// Graphs of a few nodes, built here: input x (N, 2, 3).
class OnnxShapeChain : public test_util::TempFolderTest {
 protected:
  OnnxShapeChain() : TempFolderTest("onnx") {}

  ::onnx::ModelProto m;
  ::onnx::GraphProto* g = nullptr;

  void SetUp() override {
    m.set_ir_version(8);
    m.add_opset_import()->set_version(13);
    g = m.mutable_graph();
    g->set_name("g");
    auto* t = g->add_input();
    t->set_name("x");
    auto* tt = t->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(::onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("N");
    tt->mutable_shape()->add_dim()->set_dim_value(2);
    tt->mutable_shape()->add_dim()->set_dim_value(3);
  }
  ::onnx::NodeProto* node(const char* op, std::vector<std::string> in, const char* out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  }
  void axis(::onnx::NodeProto* n, int64_t value) {
    auto* a = n->add_attribute();
    a->set_name("axis");
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(value);
  }
  void constant(const char* name, float value) {
    auto* a = node("Constant", {}, name)->add_attribute();
    a->set_name("value_float");
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(value);
  }
  void ints(const char* name, std::vector<int64_t> v, bool scalar = false) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::INT64);
    if (!scalar) t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
  }
  Program compile(const char* output) {
    auto* o = g->add_output();
    o->set_name(output);
    auto* t = o->mutable_type()->mutable_tensor_type();
    t->set_elem_type(::onnx::TensorProto::FLOAT);
    t->mutable_shape();
    return Program(m);
  }
};

// x.reshape(x.shape[0], -1) as PyTorch writes it: the batch read at run time.
TEST_F(OnnxShapeChain, AReshapeToTheBatchAtHandFollowsEveryBatchSize) {
  node("Shape", {"x"}, "s");
  ints("zero", {0}, true);
  ints("axes", {0});
  ints("minus_one", {-1});
  node("Gather", {"s", "zero"}, "n");
  node("Unsqueeze", {"n", "axes"}, "n1");
  axis(node("Concat", {"n1", "minus_one"}, "shape"), 0);
  node("Reshape", {"x", "shape"}, "y");
  const Program p = compile("y");
  for (int64_t n : {1, 4, 7}) {
    const Tensor x = Tensor::full({n, 2, 3}, 1.0f);
    EXPECT_EQ(p.run({x}).at(0).shape(), (engine::Shape{n, 6})) << "batch " << n;
  }
}

// A constant mask, as GPT-2's causal one: Range, Reshape, Sub and Equal folded at
// import, then Where(mask, x, fill) at run time, broadcast over the batch.
TEST_F(OnnxShapeChain, WhereTakesAConditionFoldedAtImport) {
  ints("zero", {0}, true);
  ints("two", {2}, true);
  ints("three", {3}, true);
  ints("one", {1}, true);
  ints("col_shape", {2, 1});
  node("Range", {"zero", "three", "one"}, "cols");
  node("Range", {"zero", "two", "one"}, "row_list");
  node("Reshape", {"row_list", "col_shape"}, "rows");
  node("Sub", {"rows", "cols"}, "diff");  // (2, 3): row - col
  node("Equal", {"diff", "zero"}, "diagonal");
  constant("fill", -5.0f);
  node("Where", {"diagonal", "x", "fill"}, "y");
  const Program p = compile("y");
  EXPECT_TRUE(p.initializers().empty());  // nothing here is a parameter
  const Tensor x = Tensor::from_vector({2, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  EXPECT_EQ(p.run({x}).at(0).to_vector(), (std::vector<float>{1, -5, -5, -5, 5, -5, 7, -5, -5, -5, 11, -5}));
}

// GPT-2's causal mask: a constant bool buffer sliced to the length at hand (read from a
// shape), then Where(mask, scores, fill) at run time.
TEST_F(OnnxShapeChain, AConstantMaskSlicedToTheLengthAtHandFollowsIt) {
  auto* mask = g->add_initializer();
  mask->set_name("mask");
  mask->set_data_type(::onnx::TensorProto::BOOL);
  mask->add_dims(4);
  mask->add_dims(4);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) mask->add_int32_data(c <= r ? 1 : 0);
  ints("one", {1}, true);
  ints("axes", {0, 1});
  node("Shape", {"x"}, "s");
  node("Gather", {"s", "one"}, "t");  // x (N, T, T') with T = 2 here
  ints("unsqueeze_axes", {0});
  node("Unsqueeze", {"t", "unsqueeze_axes"}, "t1");
  axis(node("Concat", {"t1", "t1"}, "ends"), 0);
  ints("starts", {0, 0});
  node("Slice", {"mask", "starts", "ends", "axes"}, "causal");  // (T, T)
  ints("col_starts", {0});
  ints("col_ends", {2});
  ints("col_axes", {2});
  node("Slice", {"x", "col_starts", "col_ends", "col_axes"}, "square");  // (N, 2, 2)
  constant("fill", -9.0f);
  node("Where", {"causal", "square", "fill"}, "y");
  const Program p = compile("y");
  const Tensor x = Tensor::from_vector({1, 2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(p.run({x}).at(0).to_vector(), (std::vector<float>{1, -9, 4, 5}));
}

TEST_F(OnnxShapeChain, AnIntegerNodeOnAFloatTensorIsRefusedNamingTheNode) {
  node("Equal", {"x", "x"}, "y");
  try {
    compile("y");
    FAIL() << "Equal of float tensors was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("node \"y\" (op Equal)"), std::string::npos) << what;
  }
}

class OnnxFoldHostile : public OnnxShapeChain {};

// Integer nodes compute shapes, indices and masks: one asking for more is refused at
// import, before anything is allocated.
TEST_F(OnnxFoldHostile, AHugeConstantOfShapeOrRangeIsRefusedNotAllocated) {
  ints("huge", {1 << 20, 1 << 20, 1 << 20});
  node("ConstantOfShape", {"huge"}, "filled");
  ints("start", {0}, true);
  ints("limit", {int64_t{1} << 40}, true);
  ints("step", {1}, true);
  node("Range", {"start", "limit", "step"}, "range");
  node("Relu", {"x"}, "y");
  for (const char* bad : {"filled", "range"}) {
    try {
      ::onnx::ModelProto copy = m;
      auto* g2 = copy.mutable_graph();
      // Keep only the node that makes `bad` and the Relu.
      for (int i = g2->node_size() - 1; i >= 0; --i)
        if (g2->node(i).output(0) != bad && g2->node(i).output(0) != "y") g2->mutable_node()->DeleteSubrange(i, 1);
      auto* o = g2->add_output();
      o->set_name("y");
      o->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
      o->mutable_type()->mutable_tensor_type()->mutable_shape();
      Program p(copy);
      ADD_FAILURE() << bad << " was folded";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("node \"") + bad + "\""), std::string::npos) << what;
      EXPECT_NE(what.find("16777216"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace quartet::workloads::onnx

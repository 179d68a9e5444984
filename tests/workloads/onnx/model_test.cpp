// Models imported from ONNX files: the tiny CNN of tests/data/onnx/ (exported from
// PyTorch by make_fixtures.py) against what PyTorch computed on it, its stages, its
// parameters, and the refusals of what the importer does not run.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "tests/temp_folder.h"
#include "tests/workloads/onnx/expected.h"
#include "workloads/models.h"
#include "workloads/onnx/model.h"
#include "workloads/workload.h"

namespace quartet::workloads::onnx {
namespace {

using engine::Tensor;

const std::string kTinyCnn = std::string(QUARTET_TEST_DATA_DIR) + "/onnx/tiny_cnn.onnx";

std::map<std::string, Tensor> expected() { return testing::expected("tiny_cnn_expected.pb"); }
using testing::max_rel_diff;

// The ONNX initializer name of a parameter: what follows its stage's name.
std::string initializer_name(const std::string& parameter) { return parameter.substr(parameter.find('.') + 1); }

TEST(OnnxModel, TinyCnnForwardEqualsPyTorch) {
  auto e = expected();
  auto model = import_model(kTinyCnn, 1);
  model->eval();
  EXPECT_LT(max_rel_diff(model->forward(e["input"]), e["logits"]), 1e-5);
}

TEST(OnnxModel, OneSgdStepEqualsPyTorch) {
  auto e = expected();
  auto model = import_model(kTinyCnn, 1);
  EXPECT_EQ(testing::expect_one_sgd_step(*model, e), 10);
}

TEST(OnnxModel, StagesAreCutWhereOneTensorCrossesAndNeverInsideASkip) {
  const GraphInfo info = inspect_model(kTinyCnn);
  // conv2 and its ReLU sit inside the skip that Add closes: no cut after them.
  EXPECT_EQ(info.stages, (std::vector<std::string>{"conv1_Conv", "bn1_BatchNormalization", "Relu", "pool_MaxPool",
                                                   "Add", "conv3_Conv", "Relu_2", "GlobalAveragePool", "Flatten",
                                                   "fc_Gemm"}));
  EXPECT_EQ(info.input_shape, (engine::Shape{1, 28, 28}));
  EXPECT_EQ(info.num_classes, 10);
  auto model = import_model(kTinyCnn, 1);
  EXPECT_EQ(model->stage_names(), info.stages);
  // A cut model runs as the whole one.
  auto e = expected();
  model->eval();
  const engine::TensorList front = model->forward_stages({e["input"]}, 0, 4);
  const engine::TensorList back = model->forward_stages(front, 4, model->num_stages());
  EXPECT_LT(max_rel_diff(back.at(0), e["logits"]), 1e-5);
}

TEST(OnnxModel, ParametersKeepTheInitializerNamesAndRunningStatisticsAreBuffers) {
  auto model = import_model(kTinyCnn, 1);
  std::vector<std::string> params, buffers;
  for (const auto& [name, t] : model->named_parameters()) params.push_back(name);
  for (const auto& [name, t] : model->named_buffers()) buffers.push_back(name);
  EXPECT_EQ(params, (std::vector<std::string>{"conv1_Conv.conv1.weight", "conv1_Conv.conv1.bias",
                                              "bn1_BatchNormalization.bn1.weight", "bn1_BatchNormalization.bn1.bias",
                                              "Add.conv2.weight", "Add.conv2.bias", "conv3_Conv.conv3.weight",
                                              "conv3_Conv.conv3.bias", "fc_Gemm.fc.weight", "fc_Gemm.fc.bias"}));
  EXPECT_EQ(buffers, (std::vector<std::string>{"bn1_BatchNormalization.bn1.running_mean",
                                               "bn1_BatchNormalization.bn1.running_var"}));
  EXPECT_EQ(inspect_model(kTinyCnn).parameters, 36 + 4 + 4 + 4 + 144 + 4 + 288 + 8 + 80 + 10);
}

TEST(OnnxModel, TheModelZooNamesItAndTheImageWorkloadsTakeIt) {
  const std::string name = std::string(kPrefix) + kTinyCnn;
  const ModelInfo info = model_info(name);
  EXPECT_EQ(info.task, kImageClassification);
  EXPECT_EQ(info.num_classes, 10);
  EXPECT_NO_THROW(check_workload_model("fashion-mnist", name));
  EXPECT_NO_THROW(check_workload_model("synthetic", name));
  try {
    check_workload_model("text-lm", name);
    ADD_FAILURE() << "text-lm took an image model";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("text-lm"), std::string::npos) << e.what();
  }
}

// A one-node graph written to a file: input (N, features) float.
class OnnxGraphFile : public test_util::TempFolderTest {
 protected:
  OnnxGraphFile() : TempFolderTest("onnx") {}

  std::string write(const std::string& op, std::vector<int64_t> input = {-1, 1, 28, 28},
                    std::vector<int64_t> output = {-1, 10}) {
    ::onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(13);
    auto* g = m.mutable_graph();
    g->set_name("g");
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name("the_node");
    n->add_input("x");
    n->add_output("y");
    auto value = [](::onnx::ValueInfoProto* v, const char* name, const std::vector<int64_t>& dims) {
      v->set_name(name);
      auto* t = v->mutable_type()->mutable_tensor_type();
      t->set_elem_type(::onnx::TensorProto::FLOAT);
      for (int64_t d : dims) {
        auto* dim = t->mutable_shape()->add_dim();
        if (d < 0) dim->set_dim_param("N");
        else dim->set_dim_value(d);
      }
    };
    value(g->add_input(), "x", input);
    value(g->add_output(), "y", output);
    const std::string path = (dir_ / (op + ".onnx")).string();
    std::ofstream out(path, std::ios::binary);
    m.SerializeToOstream(&out);
    return path;
  }
};

TEST_F(OnnxGraphFile, AnUnsupportedOpIsRefusedNamingTheNodeTheOpAndTheSupportedOnes) {
  const std::string path = write("Abs");
  try {
    inspect_model(path);
    FAIL() << "Abs was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    for (const char* part : {"the_node", "op Abs", "supported ops: Add,", "Conv", path.c_str()})
      EXPECT_NE(what.find(part), std::string::npos) << "\"" << what << "\" lacks " << part;
  }
}

TEST_F(OnnxGraphFile, AModelThatDoesNotFitTheWorkloadIsRefusedNamingBoth) {
  const std::string name = std::string(kPrefix) + write("Identity", {-1, 5}, {-1, 5});
  try {
    check_workload_model("fashion-mnist", name);
    FAIL() << "a (N, 5) model fit fashion-mnist";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    for (const char* part : {"takes input [5]", "gives 5 classes", "fashion-mnist", "[1, 28, 28] images of 10 classes"})
      EXPECT_NE(what.find(part), std::string::npos) << "\"" << what << "\" lacks " << part;
  }
}

// PyTorch's exporter keeps one copy of equal initializers and names the others through
// Identity nodes: y = x + a.bias + b.bias, b.bias = Identity(a.bias), a.bias = 0.5.
class OnnxRenamedInitializer : public OnnxGraphFile {
 protected:
  std::string write_renamed() {
    ::onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(13);
    auto* g = m.mutable_graph();
    g->set_name("g");
    auto node = [&](const char* op, std::vector<std::string> in, const char* out) {
      auto* n = g->add_node();
      n->set_op_type(op);
      n->set_name(out);
      for (const auto& i : in) n->add_input(i);
      n->add_output(out);
    };
    node("Identity", {"a.bias"}, "b.bias");
    node("Add", {"x", "a.bias"}, "h");
    node("Add", {"h", "b.bias"}, "y");
    auto* w = g->add_initializer();
    w->set_name("a.bias");
    w->set_data_type(::onnx::TensorProto::FLOAT);
    w->add_dims(10);
    for (int i = 0; i < 10; ++i) w->add_float_data(0.5f);
    for (const char* name : {"x", "y"}) {
      auto* v = std::string(name) == "x" ? g->add_input() : g->add_output();
      v->set_name(name);
      auto* t = v->mutable_type()->mutable_tensor_type();
      t->set_elem_type(::onnx::TensorProto::FLOAT);
      t->mutable_shape()->add_dim()->set_dim_param("N");
      t->mutable_shape()->add_dim()->set_dim_value(10);
    }
    const std::string path = (dir_ / "renamed.onnx").string();
    {
      std::ofstream out(path, std::ios::binary);
      m.SerializeToOstream(&out);
    }
    return path;
  }
};

// Each name stays a parameter of its own, as in PyTorch.
TEST_F(OnnxRenamedInitializer, AnInitializerRenamedByIdentityIsAParameterOfItsOwn) {
  const std::string path = write_renamed();
  auto model = import_model(path, 0);
  std::vector<std::string> names;
  for (const auto& [name, t] : model->named_parameters()) names.push_back(initializer_name(name));
  EXPECT_EQ(names, (std::vector<std::string>{"a.bias", "b.bias"}));
  Tensor x = Tensor::zeros({2, 10});
  engine::sum(model->forward(x)).backward();
  for (const auto& [name, t] : model->named_parameters()) {
    EXPECT_EQ(t.to_vector(), std::vector<float>(10, 0.5f)) << name;
    EXPECT_EQ(t.grad().to_vector(), std::vector<float>(10, 2.0f)) << name;  // each its own gradient
  }
}

// Export writes each such parameter's trained value as an initializer of its own, in
// place of its Identity node, and the file reads back with both values.
TEST_F(OnnxRenamedInitializer, ExportGivesARenamedParameterItsOwnInitializer) {
  const std::string path = write_renamed();
  auto model = import_model(path, 0);
  float v = 1.0f;
  for (auto& [name, t] : model->named_parameters()) {
    Tensor p = t;
    std::fill(p.data(), p.data() + p.numel(), v);
    v += 1.0f;
  }
  const std::string out = (dir_ / "exported.onnx").string();
  export_model(path, *model, out);
  ::onnx::ModelProto back;
  {
    std::ifstream in(out, std::ios::binary);
    ASSERT_TRUE(back.ParseFromIstream(&in));
  }
  for (const auto& n : back.graph().node()) EXPECT_NE(n.op_type(), "Identity");
  ASSERT_EQ(back.graph().initializer_size(), 2);
  const auto reread = import_model(out, 0);
  std::vector<std::pair<std::string, std::vector<float>>> values;
  for (const auto& [name, t] : reread->named_parameters()) values.emplace_back(initializer_name(name), t.to_vector());
  EXPECT_EQ(values, (std::vector<std::pair<std::string, std::vector<float>>>{
                        {"a.bias", std::vector<float>(10, 1.0f)}, {"b.bias", std::vector<float>(10, 2.0f)}}));
}

class OnnxImportHostile : public test_util::TempFolderTest {
 protected:
  OnnxImportHostile() : TempFolderTest("onnx") {}
};

TEST_F(OnnxImportHostile, GarbageAndMissingFilesAreRefusedNotCrashedOn) {
  const std::string garbage = (dir_ / "garbage.onnx").string();
  {
    std::ofstream out(garbage, std::ios::binary);
    for (int i = 0; i < 4096; ++i) out.put(static_cast<char>((i * 7919) & 0xff));
  }
  for (const std::string& path : {garbage, (dir_ / "missing.onnx").string()}) {
    try {
      inspect_model(path);
      ADD_FAILURE() << path << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace quartet::workloads::onnx

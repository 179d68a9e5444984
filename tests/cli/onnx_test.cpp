// Models from ONNX files through the `quartet` binary: a spec names "onnx:FILE" relative
// to itself, validate refuses a graph the importer cannot run (exit 2, naming the node
// and the op), and a run's trained weights export back into the graph. Real processes,
// so labelled multirank and run serially. Skipped in a build without the onnx library.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/safetensors.h"
#include "tests/cli/cli_util.h"
#include "workloads/models.h"
#include "workloads/onnx/model.h"

namespace {

namespace fs = std::filesystem;
using namespace quartet;
using cli_util::expect_exit2_with;
using cli_util::quartet;
using cli_util::Result;

class OnnxCli : public cli_util::FolderTest {
 protected:
  OnnxCli() : FolderTest("cli_onnx") {}
  void SetUp() override {
    if (!workloads::onnx::available()) GTEST_SKIP() << "this build reads no ONNX files (QUARTET_ONNX)";
    FolderTest::SetUp();
    fs::create_directories(dir_ / "models");
    for (const char* f : {"tiny_cnn.onnx", "tiny_vit.onnx", "unsupported_op.onnx"})
      fs::copy_file(fs::path(QUARTET_TEST_DATA_DIR) / "onnx" / f, dir_ / "models" / f,
                    fs::copy_options::overwrite_existing);
  }
  // A spec beside models/: the model path is relative to it.
  fs::path spec(const std::string& model) {
    const fs::path p = dir_ / "spec.json";
    std::ofstream(p) << (R"({"name": "onnx", "workload": {"name": "synthetic", "model": "onnx:models/)" + model +
                             R"(", "train_samples": 64, "test_samples": 32}, "seed": 1,
      "train": {"epochs": 1, "batch": 16, "optimizer": {"name": "sgd", "lr": 0.05}},
      "arms": [{"name": "single", "regime": "single"}]})");
    return p;
  }
};

TEST_F(OnnxCli, ValidateReadsTheModelRelativeToTheSpec) {
  const Result r = quartet({"validate", spec("tiny_cnn.onnx").string()}, dir_);
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST_F(OnnxCli, ValidateRefusesAnUnsupportedOpNamingTheNodeAndTheOp) {
  const Result r = quartet({"validate", spec("unsupported_op.onnx").string()}, dir_);
  expect_exit2_with(r, "node \"the_cos\" (op Cos): op Cos is not supported; supported ops: Add,");
  expect_exit2_with(r, "spec.workload.model");
}

// A spec whose model file a script writes, before the script has run: exit 2 naming the
// file and the script.
TEST_F(OnnxCli, ValidateNamesTheScriptThatWritesAMissingModelFile) {
  const fs::path p = dir_ / "later.json";
  std::ofstream(p) << R"({"name": "later", "workload": {"name": "synthetic", "model": "onnx:models/later.onnx",
      "model_made_by": "bench/write_later.py"}, "train": {"epochs": 1, "batch": 16},
      "arms": [{"name": "single", "regime": "single"}]})";
  const Result r = quartet({"validate", p.string()}, dir_);
  expect_exit2_with(r, "later.onnx: no such file; it is written by `bench/write_later.py`: run that first");
}

// An arm of its own ONNX model beside the workload's built-in one: its initial weights
// are the file's, saved under a name made from the file's.
TEST_F(OnnxCli, AnArmTrainsItsOwnOnnxModelBesideABuiltInOne) {
  const fs::path p = dir_ / "arms.json";
  std::ofstream(p) << R"({"name": "arms", "workload": {"name": "synthetic", "model": "cnn", "train_samples": 64,
      "test_samples": 32}, "seed": 1, "train": {"epochs": 1, "batch": 16, "optimizer": {"name": "sgd", "lr": 0.05}},
      "arms": [{"name": "cnn", "regime": "single"},
               {"name": "mine", "regime": "single", "model": "onnx:models/tiny_cnn.onnx"}]})";
  const Result r = quartet({"run", p.string(), "--out", (dir_ / "run").string(), "--progress=none"}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "run" / "mine" / "final.safetensors"));
  int inits = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "run"))
    inits += e.path().filename().string().rfind("init-onnx-tiny_cnn-", 0) == 0;
  EXPECT_EQ(inits, 1);
}

TEST_F(OnnxCli, ListNamesTheStagesOfAFile) {
  const Result r = quartet({"list", "models", "--onnx", (dir_ / "models" / "tiny_cnn.onnx").string()}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(582 parameters)  stages: conv1_Conv bn1_BatchNormalization Relu pool_MaxPool Add conv3_Conv"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("input [1, 28, 28] per sample, 10 classes"), std::string::npos) << r.out;
  expect_exit2_with(quartet({"list", "models", "--onnx", (dir_ / "models" / "unsupported_op.onnx").string()}, dir_),
                    "--onnx: model onnx:");
}

// A transformer's cuts lie between its blocks, where the residual stream alone crosses;
// split takes one as for any model.
TEST_F(OnnxCli, ATransformersStagesAreListedAndSplitCutsAtOne) {
  const Result r = quartet({"list", "models", "--onnx", (dir_ / "models" / "tiny_vit.onnx").string()}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("stages: patch_embed_Conv Reshape Transpose Concat_2 Add blocks_blocks_0_Add "
                       "blocks_blocks_0_Add_1 blocks_blocks_1_Add blocks_blocks_1_Add_1 norm_LayerNormalization "
                       "Gather_1 head_Gemm"),
            std::string::npos)
      << r.out;
  const fs::path p = dir_ / "vit.json";
  std::ofstream(p) << R"({"name": "vit", "workload": {"name": "synthetic", "model": "onnx:models/tiny_vit.onnx",
      "train_samples": 64, "test_samples": 32}, "seed": 1,
      "train": {"epochs": 1, "batch": 16, "optimizer": {"name": "sgd", "lr": 0.05}},
      "arms": [{"name": "single", "regime": "single"},
               {"name": "split", "regime": "split", "clients": 2, "cut": "blocks_blocks_0_Add_1"}]})";
  const Result run = quartet({"run", p.string(), "--out", (dir_ / "run").string(), "--progress=none"}, dir_);
  ASSERT_EQ(run.code, 0) << run.out;
  for (const char* arm : {"single", "split"})
    EXPECT_TRUE(fs::exists(dir_ / "run" / arm / "final.safetensors")) << arm;
}

TEST_F(OnnxCli, ExportWritesTheTrainedWeightsIntoTheGraph) {
  const Result run =
      quartet({"run", spec("tiny_cnn.onnx").string(), "--out", (dir_ / "run").string(), "--progress=none"}, dir_);
  ASSERT_EQ(run.code, 0) << run.out;
  const fs::path arm = dir_ / "run" / "single";
  const fs::path out = dir_ / "trained.onnx";
  const Result ex = quartet({"export", arm.string(), "--onnx", out.string()}, dir_);
  ASSERT_EQ(ex.code, 0) << ex.out;
  // Read back: the graph imports with the trained values under the same names.
  const engine::NamedTensors trained = engine::read_safetensors((arm / "final.safetensors").string()).tensors;
  const engine::NamedTensors back = workloads::onnx::import_model(out.string(), 0)->state_dict();
  ASSERT_EQ(back.size(), trained.size());
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].first, trained[i].first);
    EXPECT_EQ(back[i].second.to_vector(), trained[i].second.to_vector()) << back[i].first;
  }
  const auto initial = workloads::make_model("onnx:" + (dir_ / "models" / "tiny_cnn.onnx").string(), 0)->state_dict();
  EXPECT_NE(initial[0].second.to_vector(), trained[0].second.to_vector());
  // A folder that is no finished arm is refused, saying why.
  expect_exit2_with(quartet({"export", (dir_ / "nowhere").string(), "--onnx", out.string()}, dir_),
                    "holds no final.safetensors");
}

}  // namespace

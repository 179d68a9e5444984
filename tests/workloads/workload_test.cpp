#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/optim.h"
#include "workloads/sampler.h"
#include "workloads/workload.h"

namespace quartet::workloads {
namespace {

WorkloadConfig synthetic_config(const std::string& model = "mlp") {
  WorkloadConfig c;
  c.name = "synthetic";
  c.model = model;
  c.synthetic_train = 1024;
  c.synthetic_test = 256;
  c.seed = 1;
  return c;
}

std::string error_of(auto f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Workload, SyntheticWorkloadHasTheRequestedSizes) {
  const auto w = make_workload(synthetic_config());
  EXPECT_EQ(w->name(), "synthetic");
  EXPECT_EQ(w->train_size(), 1024);
  EXPECT_EQ(w->test_size(), 256);
  EXPECT_EQ(w->metric_name(), "accuracy");
  EXPECT_EQ(w->default_model(), "mlp");
}

TEST(Workload, UnknownWorkloadListsTheKnownOnes) {
  WorkloadConfig c;
  c.name = "cifar";
  EXPECT_EQ(error_of([&] { make_workload(c); }),
            "unknown workload \"cifar\"; known workloads: fashion-mnist, synthetic, phantom-ct-seg, phantom-mri-seg, "
            "msd-folder, text-lm");
}

TEST(Workload, UnknownModelIsRefusedBeforeDataIsRead) {
  WorkloadConfig c;
  c.model = "vgg";
  c.data_dir = "/nonexistent/folder";
  EXPECT_NE(error_of([&] { make_workload(c); }).find("known models: mlp, lenet5, cnn"), std::string::npos);
}

TEST(Workload, FashionMnistFromAMissingFolderSaysHowToGetIt) {
  WorkloadConfig c;
  c.data_dir = "/nonexistent/folder";
  EXPECT_NE(error_of([&] { make_workload(c); }).find("apt-get install dataset-fashion-mnist"), std::string::npos);
}

TEST(Workload, MakeModelWithTheSameSeedGivesTheSameWeights) {
  const auto w = make_workload(synthetic_config());
  const auto a = w->make_model(9)->parameters(), b = w->make_model("mlp", 9)->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].to_vector(), b[i].to_vector());
}

TEST(Workload, LossIsMeanCrossEntropy) {
  const auto w = make_workload(synthetic_config());
  const engine::Tensor logits = engine::Tensor::zeros({4, 10});
  EXPECT_NEAR(w->loss(logits, {0, 1, 2, 3}).item(), std::log(10.0f), 1e-5);
}

TEST(Workload, EvaluateCountsEverySampleAndRestoresTrainingMode) {
  const auto owned = make_workload(synthetic_config());
  const auto* w = dynamic_cast<const ImageClassificationWorkload*>(owned.get());
  const auto model = w->make_model(1);
  const ImageDataset seven = w->test_set().take_first(7);
  const double acc = w->evaluate(*model, seven, 3);  // batches of 3, 3, 1
  EXPECT_NEAR(acc * 7, std::round(acc * 7), 1e-9);
  EXPECT_TRUE(model->training());
  model->eval();
  EXPECT_EQ(w->evaluate(*model, seven, 7), acc);
  EXPECT_FALSE(model->training());
}

TEST(Workload, MlpLearnsTheSyntheticData) {
  const auto w = make_workload(synthetic_config());
  const auto model = w->make_model(1);
  engine::SGD opt(model->parameters(), engine::SgdOptions{.lr = 0.05f, .momentum = 0.9f});
  const int64_t per_epoch = batches_per_epoch(w->train_size(), 32);
  for (int64_t step = 0; step < 96; ++step) {
    const auto order = epoch_permutation(w->train_size(), 1, step / per_epoch);
    const Batch b = w->train_batch(batch_at(order, 32, step % per_epoch), step / per_epoch);
    opt.zero_grad();
    w->loss(model->forward(b.x), b.y).backward();
    opt.step();
  }
  EXPECT_GT(w->evaluate(*model, 128), 0.9);
}

}  // namespace
}  // namespace quartet::workloads

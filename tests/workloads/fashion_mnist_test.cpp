#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <vector>

#include "engine/optim.h"
#include "engine/threads.h"
#include "workloads/idx.h"
#include "workloads/models.h"
#include "workloads/sampler.h"
#include "workloads/workload.h"

namespace quartet::workloads {
namespace {

// Loaded once for the whole binary; null when the Debian package is not installed.
const DatasetSplits* fashion_mnist() {
  static const auto data = []() -> std::unique_ptr<DatasetSplits> {
    if (!std::filesystem::is_directory(kFashionMnistDir)) return nullptr;
    return std::make_unique<DatasetSplits>(load_idx_folder(kFashionMnistDir));
  }();
  return data.get();
}

#define REQUIRE_FASHION_MNIST()                                                                  \
  if (!fashion_mnist())                                                                         \
  GTEST_SKIP() << kFashionMnistDir << " is absent; apt-get install dataset-fashion-mnist to run " \
                  "the tests on real data"

TEST(FashionMnist, Has60000TrainingAnd10000TestImagesWithLabelsInZeroToTen) {
  REQUIRE_FASHION_MNIST();
  const DatasetSplits& d = *fashion_mnist();
  EXPECT_EQ(d.train.size(), 60000);
  EXPECT_EQ(d.test.size(), 10000);
  EXPECT_EQ(d.train.sample_shape(), (engine::Shape{1, 28, 28}));
  for (const ImageDataset* split : {&d.train, &d.test})
    for (int32_t y : split->labels()) ASSERT_TRUE(y >= 0 && y < 10) << y;
  EXPECT_EQ(d.train.label_histogram(), std::vector<int64_t>(10, 6000));
  EXPECT_EQ(d.test.label_histogram(), std::vector<int64_t>(10, 1000));
}

TEST(FashionMnist, TrainingPixelsHaveTheStatedMeanAndStd) {
  REQUIRE_FASHION_MNIST();
  const ImageDataset& train = fashion_mnist()->train;
  const uint8_t* p = train.pixels(0);
  const int64_t n = train.size() * train.sample_numel();
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = p[i] / 255.0;
    s += v;
    s2 += v * v;
  }
  const double mean = s / n, std = std::sqrt(s2 / n - mean * mean);
  EXPECT_NEAR(mean, kFashionMnistNormalization.mean, 5e-4);
  EXPECT_NEAR(std, kFashionMnistNormalization.std, 5e-4);
}

TEST(FashionMnist, WorkloadServesTheRealData) {
  REQUIRE_FASHION_MNIST();
  WorkloadConfig c;
  c.name = "fashion-mnist";
  const auto w = make_workload(c);
  EXPECT_EQ(w->train_size(), 60000);
  EXPECT_EQ(w->test_size(), 10000);
  EXPECT_EQ(w->default_model(), "cnn");
}

// The engine, the data path and the cnn together: ~300 SGD steps on 2048 images must cut
// the loss well down.
TEST(FashionMnist, CnnLearnsTheFirst2048TrainingImages) {
  REQUIRE_FASHION_MNIST();
  const ImageDataset data = fashion_mnist()->train.take_first(2048);
  const auto model = make_model("cnn", 1);
  engine::SGD opt(model->parameters(), engine::SgdOptions{.lr = 0.05f, .momentum = 0.9f});
  constexpr int64_t kSteps = 300, kBatch = 32;
  const int64_t per_epoch = batches_per_epoch(data.size(), kBatch);
  std::vector<float> losses;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < kSteps; ++step) {
    const auto order = epoch_permutation(data.size(), 1, step / per_epoch);
    const Batch b = gather(data, batch_at(order, kBatch, step % per_epoch));
    opt.zero_grad();
    engine::Tensor loss = engine::cross_entropy(model->forward(b.x), b.y);
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
    ASSERT_TRUE(std::isfinite(losses.back())) << "step " << step;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double first = std::accumulate(losses.begin(), losses.begin() + 20, 0.0) / 20;
  const double last = std::accumulate(losses.end() - 20, losses.end(), 0.0) / 20;
  RecordProperty("first20_loss", std::to_string(first));
  RecordProperty("last20_loss", std::to_string(last));
  std::printf("cnn: first 20 steps %.3f, last 20 steps %.3f, %.1f s for %lld steps\n", first, last, seconds,
              static_cast<long long>(kSteps));
  EXPECT_LT(last, 0.6 * first);
  EXPECT_LT(last, 0.8);
}

// Restores the compute threads on exit.
class ThreadsScope {
 public:
  explicit ThreadsScope(int n) : saved_(engine::compute_threads()) { engine::set_compute_threads(n); }
  ~ThreadsScope() { engine::set_compute_threads(saved_); }
  ThreadsScope(const ThreadsScope&) = delete;
  ThreadsScope& operator=(const ThreadsScope&) = delete;

 private:
  int saved_;
};

// resnet-mini with BatchNorm in training mode, run as two halves that meet inside a
// residual block, so every step sends {main, skip} across the cut: 200 SGD steps of 16
// images must cut the loss well down. On one thread, so the figures do not depend on
// the core count and the test stays quick on shared cores (~3 s; with two threads on a
// loaded machine the OpenMP regions of its many small ops made it 15-60 s).
TEST(FashionMnist, ResnetMiniLearnsTheFirst1024TrainingImages) {
  REQUIRE_FASHION_MNIST();
  ThreadsScope one_thread(1);
  const ImageDataset data = fashion_mnist()->train.take_first(1024);
  const auto model = make_model("resnet-mini", 1);
  engine::SGD opt(model->parameters(), engine::SgdOptions{.lr = 0.05f, .momentum = 0.9f});
  constexpr int64_t kSteps = 200, kBatch = 16;
  const int64_t per_epoch = batches_per_epoch(data.size(), kBatch);
  const int cut = model->stage_index("layer2b");  // inside the second block
  std::vector<float> losses;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < kSteps; ++step) {
    const auto order = epoch_permutation(data.size(), 1, step / per_epoch);
    const Batch b = gather(data, batch_at(order, kBatch, step % per_epoch));
    opt.zero_grad();
    const engine::TensorList front = model->forward_stages({b.x}, 0, cut);
    ASSERT_EQ(front.size(), 2u) << "the cut inside a block sends {main, skip}";
    const engine::TensorList logits = model->forward_stages(front, cut, model->num_stages());
    engine::Tensor loss = engine::cross_entropy(logits.at(0), b.y);
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
    ASSERT_TRUE(std::isfinite(losses.back())) << "step " << step;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double first = std::accumulate(losses.begin(), losses.begin() + 20, 0.0) / 20;
  const double last = std::accumulate(losses.end() - 20, losses.end(), 0.0) / 20;
  RecordProperty("first20_loss", std::to_string(first));
  RecordProperty("last20_loss", std::to_string(last));
  std::printf("resnet-mini: first 20 steps %.3f, last 20 steps %.3f, %.1f s for %lld steps\n", first, last,
              seconds, static_cast<long long>(kSteps));
  EXPECT_LT(last, 0.6 * first);
}

}  // namespace
}  // namespace quartet::workloads

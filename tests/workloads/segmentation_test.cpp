#include "workloads/segmentation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/optim.h"
#include "medical3d/phantom.h"
#include "workloads/models.h"
#include "workloads/partition.h"

namespace quartet::workloads {
namespace {

WorkloadConfig phantoms(const std::string& name = "phantom-ct-seg", int64_t patch = 16) {
  WorkloadConfig c;
  c.name = name;
  c.model = "unet3d";
  c.volumes = 6;
  c.test_volumes = 2;
  c.volume_size = 32;
  c.patch = patch;
  c.seed = 4;
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

const SegmentationWorkload& seg(const std::unique_ptr<Workload>& w) {
  return dynamic_cast<const SegmentationWorkload&>(*w);
}

TEST(Segmentation, PhantomWorkloadSplitsTheVolumesAndServesPatches) {
  const auto w = make_workload(phantoms());
  EXPECT_EQ(w->name(), "phantom-ct-seg");
  EXPECT_EQ(w->train_size(), 4);
  EXPECT_EQ(w->test_size(), 2);
  EXPECT_EQ(w->metric_name(), "dice");
  EXPECT_EQ(w->labels_per_sample(), 16 * 16 * 16);
  EXPECT_EQ(w->label_classes(), 3);
  const Batch b = w->train_batch({3, 0, 3}, 0);
  EXPECT_EQ(b.x.shape(), (engine::Shape{3, 1, 16, 16, 16}));
  ASSERT_EQ(b.y.size(), 3u * 4096);
  EXPECT_TRUE(std::all_of(b.y.begin(), b.y.end(), [](int32_t y) { return y >= 0 && y < 3; }));
  // The same sample twice in one batch is the same crop.
  EXPECT_TRUE(std::equal(b.y.begin(), b.y.begin() + 4096, b.y.begin() + 2 * 4096));
}

// The volumes are the cases `quartet phantom --seed` writes, normalised: the test split
// is the last ones.
TEST(Segmentation, VolumesAreThePhantomCasesOfTheSeedNormalised) {
  const auto w = make_workload(phantoms());
  const auto ct = medical3d::make_phantom(medical3d::PhantomKind::ct, 32, medical3d::phantom_case_seed(4, 5));
  EXPECT_EQ(seg(w).test_volumes()[1].labels.voxels, ct.labels.voxels);
  EXPECT_EQ(seg(w).test_volumes()[1].image.voxels, normalise_image(medical3d::PhantomKind::ct, ct.image).voxels);
  for (float v : seg(w).train_volumes()[0].image.voxels) ASSERT_TRUE(v >= 0.0f && v <= 1.0f);
}

TEST(Segmentation, MriIsZScored) {
  const auto w = make_workload(phantoms("phantom-mri-seg"));
  const auto& v = seg(w).train_volumes()[0].image.voxels;
  double s = 0, s2 = 0;
  for (float x : v) {
    s += x;
    s2 += double(x) * x;
  }
  EXPECT_NEAR(s / v.size(), 0.0, 1e-4);
  EXPECT_NEAR(s2 / v.size(), 1.0, 1e-3);
}

// Augmentation depends on (seed, epoch, sample) only: batches built in any order, by any
// process, agree; another epoch gives another crop.
TEST(Segmentation, AugmentationIsSeededBySampleAndEpochAlone) {
  const auto a = make_workload(phantoms()), b = make_workload(phantoms());
  const Batch one = a->train_batch({1, 2}, 7), two = b->train_batch({2, 1}, 7);
  const std::vector<float> x1 = one.x.to_vector(), x2 = two.x.to_vector();
  EXPECT_TRUE(std::equal(x1.begin(), x1.begin() + 4096, x2.begin() + 4096));
  EXPECT_TRUE(std::equal(one.y.begin(), one.y.begin() + 4096, two.y.begin() + 4096));
  EXPECT_NE(a->train_batch({1}, 8).x.to_vector(), a->train_batch({1}, 7).x.to_vector());
  WorkloadConfig other = phantoms();
  other.seed = 5;
  EXPECT_NE(make_workload(other)->train_batch({1}, 7).y, a->train_batch({1}, 7).y);
}

// Two thirds of the patches are centred on a labelled voxel (random_crop keeps the voxel
// in the box), so at least that share holds foreground; a uniform 8^3 crop of a 32^3
// phantom would mostly miss the liver.
TEST(Segmentation, PatchesFavourForeground) {
  const auto w = make_workload(phantoms("phantom-ct-seg", 8));
  int with_foreground = 0;
  for (int64_t e = 0; e < 60; ++e) {
    const Batch b = w->train_batch({0}, e);
    with_foreground += std::any_of(b.y.begin(), b.y.end(), [](int32_t y) { return y > 0; });
  }
  EXPECT_GE(with_foreground, 36);
}

TEST(Segmentation, BadIndexIsOutOfRange) {
  const auto w = make_workload(phantoms());
  EXPECT_THROW(w->train_batch({4}, 0), std::out_of_range);
  EXPECT_THROW(w->train_batch({-1}, 0), std::out_of_range);
}

TEST(Segmentation, SampleClassesSplitTheLesionBurdenAtTheMedian) {
  WorkloadConfig c = phantoms();
  c.volumes = 12;
  const auto w = make_workload(c);
  const auto classes = w->sample_classes();
  ASSERT_EQ(classes.size(), 10u);
  EXPECT_EQ(w->num_classes(), 2);
  const auto ones = std::count(classes.begin(), classes.end(), 1);
  EXPECT_GE(ones, 5);
  EXPECT_LE(ones, 6);
  PartitionSpec ps;
  ps.kind = "shards";
  ps.clients = 2;
  ps.shards_per_client = 1;
  const Partition p = make_partition(ps, *w);
  EXPECT_EQ(p.num_classes, 2);
  EXPECT_EQ(p.clients[0].size() + p.clients[1].size(), 10u);
}

TEST(Segmentation, LossIsDicePerSamplePlusCrossEntropy) {
  const auto w = make_workload(phantoms());
  const Batch b = w->train_batch({0, 1}, 0);
  const engine::Tensor logits = engine::Tensor::zeros({2, 3, 16, 16, 16});
  const float expected = engine::soft_dice_loss(logits, b.y, false, 1e-5f, true).item() + std::log(3.0f);
  EXPECT_NEAR(w->loss(logits, b.y).item(), expected, 1e-5);
}

TEST(Segmentation, EvaluateScoresEveryTestVolumeAndRestoresTrainingMode) {
  const auto w = make_workload(phantoms("phantom-ct-seg", 32));  // one window a volume
  const auto model = w->make_model(1);
  const double d = w->evaluate(*model, 2);
  EXPECT_GE(d, 0.0);
  EXPECT_LE(d, 1.0);
  EXPECT_TRUE(model->training());
  model->eval();
  EXPECT_EQ(w->evaluate(*model, 1), d) << "the batch of windows does not change the result";
  EXPECT_FALSE(model->training());
}

// The registered unet3d, a few Adam steps on two patches: the loss falls.
TEST(Segmentation, Unet3dLearnsTwoPatches) {
  const auto w = make_workload(phantoms());
  const auto model = w->make_model(1);
  engine::Adam opt(model->parameters(), engine::AdamOptions{.lr = 3e-3f});
  const Batch b = w->train_batch({0, 1}, 0);
  std::vector<float> losses;
  for (int step = 0; step < 15; ++step) {
    opt.zero_grad();
    engine::Tensor loss = w->loss(model->forward(b.x), b.y);
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  EXPECT_LT(losses.back(), 0.8f * losses.front());
}

TEST(Segmentation, ModelsThatDoNotSegmentVolumesAreRefused) {
  WorkloadConfig c = phantoms();
  c.model = "cnn";
  const std::string msg = error_of([&] { make_workload(c); });
  EXPECT_NE(msg.find("model cnn does not fit workload phantom-ct-seg"), std::string::npos) << msg;
  EXPECT_NE(msg.find("models that do: unet3d"), std::string::npos) << msg;
  WorkloadConfig f;
  f.name = "synthetic";
  f.model = "unet3d";
  EXPECT_NE(error_of([&] { make_workload(f); }).find("does not classify images"), std::string::npos);
  EXPECT_EQ(workload_model_names("phantom-mri-seg"), std::vector<std::string>{"unet3d"});
  EXPECT_EQ(make_workload(phantoms())->model_names(), std::vector<std::string>{"unet3d"});
}

TEST(Segmentation, BadSizesAreRefusedNamingTheField) {
  auto msg = [](auto change) {
    WorkloadConfig c = phantoms();
    change(c);
    return error_of([&] { make_workload(c); });
  };
  EXPECT_NE(msg([](WorkloadConfig& c) { c.test_volumes = 6; }).find("test_volumes"), std::string::npos);
  EXPECT_NE(msg([](WorkloadConfig& c) { c.volumes = 1; }).find("volumes"), std::string::npos);
  EXPECT_NE(msg([](WorkloadConfig& c) { c.volume_size = 16; }).find("volume_size"), std::string::npos);
  EXPECT_NE(msg([](WorkloadConfig& c) { c.patch = 48; }).find("patch"), std::string::npos);
  EXPECT_NE(msg([](WorkloadConfig& c) { c.patch = 18; }).find("divisible by 4"), std::string::npos);
  EXPECT_NE(msg([](WorkloadConfig& c) { c.train_limit = 3; }).find("use volumes"), std::string::npos);
}

TEST(Segmentation, RegisteredUnet3dIsThreeLevelsFromSixteenChannels) {
  const ModelInfo info = model_info("unet3d");
  EXPECT_EQ(info.task, kVolumeSegmentation);
  EXPECT_EQ(info.stages, (std::vector<std::string>{"enc1", "enc2", "bottleneck", "dec2", "dec1", "head"}));
  EXPECT_EQ(info.parameters, 339603);
}

// Volume i is acquired on scanner i mod scanners: same labels, and the same image exactly
// on scanner 0.
TEST(Segmentation, ScannersChangeTheImagesOfTheirVolumesButNoLabels) {
  WorkloadConfig c = phantoms();
  const auto one = make_workload(c);
  c.scanners = 3;
  const auto three = make_workload(c);
  EXPECT_EQ(three->scanners(), 3);
  EXPECT_EQ(three->sample_scanners(), (std::vector<int32_t>{0, 1, 2, 0}));
  EXPECT_EQ(one->sample_scanners(), (std::vector<int32_t>{0, 0, 0, 0}));
  for (int64_t i = 0; i < 4; ++i) {
    const auto& a = seg(one).train_volumes()[static_cast<size_t>(i)];
    const auto& b = seg(three).train_volumes()[static_cast<size_t>(i)];
    EXPECT_EQ(a.labels.voxels, b.labels.voxels) << i;
    EXPECT_EQ(a.image.voxels == b.image.voxels, i % 3 == 0) << i;
  }
  // Test volumes 4 and 5: scanners 1 and 2.
  EXPECT_NE(seg(one).test_volumes()[0].image.voxels, seg(three).test_volumes()[0].image.voxels);
}

TEST(Segmentation, ScannerPartitionHoldsOneScannerPerClient) {
  WorkloadConfig c = phantoms();
  c.volumes = 10;
  c.scanners = 4;
  PartitionSpec spec;
  spec.kind = "scanner";
  spec.clients = 4;
  const Partition p = make_partition(spec, *make_workload(c));
  EXPECT_EQ(p.clients, (std::vector<std::vector<int64_t>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(p.counts, "scanner");
}

TEST(Segmentation, ScannersBeyondTheProfilesAreRefused) {
  WorkloadConfig c = phantoms();
  c.scanners = medical3d::kPhantomScanners + 1;
  EXPECT_NE(error_of([&] { make_workload(c); }).find("scanners: expected 1 to 4"), std::string::npos);
  c.scanners = 0;
  EXPECT_NE(error_of([&] { make_workload(c); }).find("scanners: expected 1 to 4"), std::string::npos);
}

}  // namespace
}  // namespace quartet::workloads

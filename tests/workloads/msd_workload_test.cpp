// msd-folder: a Medical Segmentation Decathlon folder (here one written by
// medical3d::write_msd_dataset) trained and scored by the phantom workloads' code.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/temp_folder.h"
#include "medical3d/msd.h"
#include "medical3d/nifti.h"
#include "workloads/segmentation.h"

namespace quartet::workloads {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class MsdFolder : public test_util::TempFolderTest {
 protected:
  MsdFolder() : TempFolderTest("msd_workload") {}
  void SetUp() override {
    TempFolderTest::SetUp();
    fs::remove(dir_);  // write() makes it: a folder that is not there is one of the cases
  }

  // Six phantoms of 32^3, seed 4: the cases phantom-ct-seg (or -mri-) makes for seed 4.
  void write(medical3d::PhantomKind kind = medical3d::PhantomKind::ct) {
    medical3d::write_msd_dataset(dir_.string(), kind, 6, 32, 4);
  }

  WorkloadConfig config() const {
    WorkloadConfig c;
    c.name = "msd-folder";
    c.model = "unet3d";
    c.data_dir = dir_.string();
    c.volumes = 0;
    c.test_volumes = 2;
    c.patch = 16;
    c.seed = 4;
    return c;
  }

  void edit_dataset_json(const std::function<void(json&)>& change) {
    json doc;
    std::ifstream(dir_ / "dataset.json") >> doc;
    change(doc);
    std::ofstream(dir_ / "dataset.json") << doc.dump(2);
  }

  std::string error_of(const WorkloadConfig& c) {
    try {
      make_workload(c);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }

};

const SegmentationWorkload& seg(const Workload& w) { return dynamic_cast<const SegmentationWorkload&>(w); }

TEST_F(MsdFolder, ServesThePatchesAndScoresOfThePhantomWorkloadOfItsCases) {
  write();
  const auto msd = make_workload(config());
  WorkloadConfig pc = config();
  pc.name = "phantom-ct-seg";
  pc.data_dir.clear();
  pc.volumes = 6;
  pc.volume_size = 32;
  const auto phantom = make_workload(pc);
  EXPECT_EQ(msd->name(), "msd-folder");
  EXPECT_EQ(msd->train_size(), 4);
  EXPECT_EQ(msd->test_size(), 2);
  EXPECT_EQ(msd->label_classes(), 3);
  EXPECT_EQ(msd->sample_classes(), phantom->sample_classes());
  // float32 NIfTI keeps every voxel, CT is windowed alike: the same crops and flips.
  const Batch a = msd->train_batch({3, 0, 1}, 2), b = phantom->train_batch({3, 0, 1}, 2);
  EXPECT_EQ(a.x.to_vector(), b.x.to_vector());
  EXPECT_EQ(a.y, b.y);
  auto model = msd->make_model(7);
  EXPECT_EQ(msd->evaluate(*model, 4), phantom->evaluate(*model, 4));
}

TEST_F(MsdFolder, AnMriModalityIsZScored) {
  write(medical3d::PhantomKind::mri);
  const auto w = make_workload(config());
  const auto& v = seg(*w).train_volumes()[0].image.voxels;
  double s = 0, s2 = 0;
  for (float x : v) {
    s += x;
    s2 += double(x) * x;
  }
  EXPECT_NEAR(s / v.size(), 0.0, 1e-4);
  EXPECT_NEAR(s2 / v.size(), 1.0, 1e-3);
}

TEST_F(MsdFolder, VolumesTakesTheFirstCasesAndTheLastOfThemAreHeldOut) {
  write();
  WorkloadConfig c = config();
  c.volumes = 4;
  c.test_volumes = 1;
  const auto w = make_workload(c);
  EXPECT_EQ(w->train_size(), 3);
  ASSERT_EQ(w->test_size(), 1);
  const medical3d::LabelVolume case3 =
      medical3d::read_nifti_labels((dir_ / "labelsTr" / "phantom_ct_003.nii.gz").string());
  EXPECT_EQ(seg(*w).test_volumes()[0].labels.voxels, case3.voxels);
}

TEST_F(MsdFolder, ClassesComeFromDatasetJsonAndSizeTheUnetHead) {
  write();
  edit_dataset_json([](json& d) { d["labels"]["3"] = "vessel"; });
  const auto w = make_workload(config());
  EXPECT_EQ(w->label_classes(), 4);
  auto model = w->make_model(1);
  const engine::Tensor y = model->forward(w->train_batch({0}, 0).x);
  EXPECT_EQ(y.shape(), (engine::Shape{1, 4, 16, 16, 16}));
}

TEST_F(MsdFolder, BadConfigsAndFoldersNameTheProblem) {
  WorkloadConfig c = config();
  c.data_dir.clear();
  EXPECT_NE(error_of(c).find("data_dir: msd-folder needs the dataset's folder"), std::string::npos) << error_of(c);
  EXPECT_NE(error_of(config()).find("no such folder"), std::string::npos) << error_of(config());
  write();
  c = config();
  c.test_volumes = 6;
  EXPECT_NE(error_of(c).find("test_volumes: expected 1 to 5 of the 6 cases"), std::string::npos) << error_of(c);
  c = config();
  c.volumes = 7;
  EXPECT_NE(error_of(c).find("volumes: 7 asked"), std::string::npos) << error_of(c);
  c = config();
  c.patch = 18;
  EXPECT_NE(error_of(c).find("patch: expected a positive multiple of 4"), std::string::npos) << error_of(c);
  c = config();
  c.patch = 48;
  EXPECT_NE(error_of(c).find("patch 48 is larger than a volume of 32 voxels"), std::string::npos) << error_of(c);

  medical3d::LabelVolume small(medical3d::Grid{.dims = {16, 16, 16}});
  medical3d::write_nifti((dir_ / "labelsTr" / "phantom_ct_001.nii.gz").string(), small);
  EXPECT_NE(error_of(config()).find("phantom_ct_001.nii.gz: 16x16x16 voxels, its image"), std::string::npos)
      << error_of(config());

  fs::remove_all(dir_);
  write();
  edit_dataset_json([](json& d) { d["modality"] = {{"0", "T2"}, {"1", "ADC"}}; });
  EXPECT_NE(error_of(config()).find("2 modalities; the volume models take one channel"), std::string::npos)
      << error_of(config());
}

}  // namespace
}  // namespace quartet::workloads

#include "medical3d/msd.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "medical3d/nifti.h"
#include "tests/medical3d/test_dir.h"

namespace quartet::medical3d {
namespace {

using testing::read_bytes;
using testing::thrown_message;
using testing::write_bytes;

class Msd : public testing::TestDir {};

TEST_F(Msd, WrittenPhantomsReadBackAsPairs) {
  const std::string root = path("ct");
  write_msd_dataset(root, PhantomKind::ct, 3, 32, 11);
  const MsdDataset d = read_msd_dataset(root);
  EXPECT_EQ(d.name, "PhantomCT");
  EXPECT_EQ(d.modality.at("0"), "CT");
  EXPECT_EQ(d.labels, (std::map<int, std::string>{{0, "background"}, {1, "organ"}, {2, "lesion"}}));
  ASSERT_EQ(d.training.size(), 3u);
  EXPECT_EQ(d.training[1].image, root + "/imagesTr/phantom_ct_001.nii.gz");
  EXPECT_EQ(d.training[1].label, root + "/labelsTr/phantom_ct_001.nii.gz");
  EXPECT_TRUE(d.test.empty());
}

TEST_F(Msd, CaseFilesHoldTheSeededPhantoms) {
  write_msd_dataset(path("mri"), PhantomKind::mri, 2, 32, 11);
  const MsdDataset d = read_msd_dataset(path("mri"));
  for (int64_t i = 0; i < 2; ++i) {
    const Sample expected = make_phantom(PhantomKind::mri, 32, phantom_case_seed(11, i));
    const Volume image = read_nifti(d.training[i].image);
    const LabelVolume labels = read_nifti_labels(d.training[i].label);
    EXPECT_EQ(image.voxels, expected.image.voxels);
    EXPECT_EQ(labels.voxels, expected.labels.voxels);
    EXPECT_TRUE(same_grid(image.grid, expected.image.grid, 1e-4));
  }
}

TEST_F(Msd, DatasetJsonFollowsTheDecathlon) {
  write_msd_dataset(path("ct"), PhantomKind::ct, 2, 32, 0);
  const auto j = nlohmann::json::parse(read_bytes(path("ct/dataset.json")));
  EXPECT_EQ(j.at("numTraining"), 2);
  EXPECT_EQ(j.at("tensorImageSize"), "3D");
  EXPECT_EQ(j.at("training")[0].at("image"), "./imagesTr/phantom_ct_000.nii.gz");
  EXPECT_EQ(j.at("training")[0].at("label"), "./labelsTr/phantom_ct_000.nii.gz");
}

TEST_F(Msd, RefusesANonEmptyFolderAndLeavesItAlone) {
  std::filesystem::create_directories(path("busy"));
  write_bytes(path("busy/keep.txt"), "mine");
  const std::string msg =
      thrown_message<std::invalid_argument>([&] { write_msd_dataset(path("busy"), PhantomKind::ct, 1, 32, 0); });
  EXPECT_NE(msg.find("folder exists and is not empty; refusing to overwrite it"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(path("busy/keep.txt")), "mine");
  EXPECT_FALSE(std::filesystem::exists(path("busy/imagesTr")));
}

TEST_F(Msd, WritesIntoAnEmptyFolder) {
  std::filesystem::create_directories(path("empty"));
  write_msd_dataset(path("empty"), PhantomKind::ct, 1, 32, 0);
  EXPECT_EQ(read_msd_dataset(path("empty")).training.size(), 1u);
}

TEST_F(Msd, RefusesABadCountOrSize) {
  EXPECT_THROW(write_msd_dataset(path("a"), PhantomKind::ct, 0, 32, 0), std::invalid_argument);
  EXPECT_THROW(write_msd_dataset(path("b"), PhantomKind::ct, 1, 16, 0), std::invalid_argument);
}

TEST_F(Msd, MissingFolderOrDatasetJsonSaySo) {
  std::string msg = thrown_message<std::runtime_error>([&] { read_msd_dataset(path("nowhere")); });
  EXPECT_NE(msg.find("no such folder"), std::string::npos) << msg;
  std::filesystem::create_directories(path("bare"));
  msg = thrown_message<std::runtime_error>([&] { read_msd_dataset(path("bare")); });
  EXPECT_NE(msg.find("has no dataset.json"), std::string::npos) << msg;
}

TEST_F(Msd, AListedFileThatIsMissingIsNamed) {
  write_msd_dataset(path("ct"), PhantomKind::ct, 2, 32, 0);
  std::filesystem::remove(path("ct/labelsTr/phantom_ct_001.nii.gz"));
  const std::string msg = thrown_message<std::runtime_error>([&] { read_msd_dataset(path("ct")); });
  EXPECT_NE(msg.find("training[1].label lists ./labelsTr/phantom_ct_001.nii.gz but " +
                     path("ct/labelsTr/phantom_ct_001.nii.gz") + " does not exist"),
            std::string::npos)
      << msg;
}

TEST_F(Msd, MalformedDatasetJsonIsRefused) {
  std::filesystem::create_directories(path("d"));
  write_bytes(path("d/dataset.json"), "{\"training\": [");
  std::string msg = thrown_message<std::runtime_error>([&] { read_msd_dataset(path("d")); });
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;

  write_bytes(path("d/dataset.json"), R"({"name": "x"})");
  msg = thrown_message<std::runtime_error>([&] { read_msd_dataset(path("d")); });
  EXPECT_NE(msg.find("has no \"training\""), std::string::npos) << msg;

  write_bytes(path("d/dataset.json"), R"({"training": [{"image": 3, "label": "a"}]})");
  msg = thrown_message<std::runtime_error>([&] { read_msd_dataset(path("d")); });
  EXPECT_NE(msg.find("training[0]: \"image\" is number, expected a string"), std::string::npos) << msg;

  write_bytes(path("d/dataset.json"), R"({"numTraining": 2, "training": []})");
  msg = thrown_message<std::runtime_error>([&] { read_msd_dataset(path("d")); });
  EXPECT_NE(msg.find("numTraining is 2 but \"training\" lists 0"), std::string::npos) << msg;
}

}  // namespace
}  // namespace quartet::medical3d

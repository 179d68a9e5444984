// The `quartet` binary built without NIfTI support (QUARTET_MEDICAL_IO off, or libnifti2
// and DCMTK not found): a spec naming msd-folder, `quartet predict`, `quartet inspect` and
// `quartet phantom` exit with code 2 and one line saying what is missing and how to get
// it. Real processes, so labelled multirank and run serially.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using cli_util::expect_exit2_with;
using cli_util::quartet;
using cli_util::Result;

const std::string kMissing = "needs Quartet built with NIfTI support (apt install libnifti2-dev libdcmtk-dev, then "
                             "rebuild)";

class WithoutMedicalIo : public cli_util::FolderTest {
 protected:
  WithoutMedicalIo() : FolderTest("cli_without_io") {}

  void expect_one_line(const std::vector<std::string>& args, const std::string& fragment) {
    const Result r = quartet(args, dir_);
    expect_exit2_with(r, fragment);
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
};

TEST_F(WithoutMedicalIo, AnMsdFolderSpecExitsWith2SayingWhatIsMissing) {
  fs::create_directories(dir_ / "Task09_Spleen");
  const json workload = {{"name", "msd-folder"}, {"model", "unet3d"}, {"data_dir", (dir_ / "Task09_Spleen").string()}};
  const json spec = {{"name", "msd"},
                     {"workload", workload},
                     {"train", {{"batch", 2}}},
                     {"arms", {{{"name", "single"}, {"regime", "single"}}}}};
  const fs::path p = dir_ / "spec.json";
  std::ofstream(p) << spec.dump(2);
  expect_one_line({"run", p.string(), "--out", (dir_ / "r").string(), "--progress=none"},
                  "quartet: msd-folder " + kMissing);
  EXPECT_FALSE(fs::exists(dir_ / "r")) << "a refused spec must not create a run folder";
}

TEST_F(WithoutMedicalIo, PredictAndPhantomExitWith2SayingWhatIsMissing) {
  expect_one_line({"predict", (dir_ / "w.safetensors").string(), (dir_ / "ct.nii.gz").string(), "--out",
                   (dir_ / "mask.nii.gz").string()},
                  "quartet: predict " + kMissing);
  expect_one_line({"phantom", "--kind", "ct", "--count", "1", "--size", "32", "--out", (dir_ / "ct").string()},
                  "quartet: phantom " + kMissing);
  EXPECT_FALSE(fs::exists(dir_ / "ct"));
}

TEST_F(WithoutMedicalIo, InspectExitsWith2SayingWhatIsMissing) {
  expect_one_line({"inspect", (dir_ / "ct.nii.gz").string()}, "quartet: inspect " + kMissing);
}

}  // namespace

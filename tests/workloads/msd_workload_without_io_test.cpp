// A build without NIfTI support (QUARTET_MEDICAL_IO off, or libnifti2 and DCMTK not
// found): the msd-folder workload says what is missing and how to get it; the phantom
// workloads, which need no files, are made as usual.

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "workloads/workload.h"

namespace quartet::workloads {
namespace {

TEST(MsdFolderWithoutIo, SaysWhatIsMissingAndHowToGetIt) {
  WorkloadConfig c;
  c.name = "msd-folder";
  c.model = "unet3d";
  c.data_dir = "Task09_Spleen";
  try {
    make_workload(c);
    FAIL() << "msd-folder was made without NIfTI support";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "msd-folder needs Quartet built with NIfTI support (apt install libnifti2-dev libdcmtk-dev, then "
              "rebuild)");
  }
}

TEST(MsdFolderWithoutIo, PhantomWorkloadsNeedNoFiles) {
  WorkloadConfig c;
  c.name = "phantom-mri-seg";
  c.model = "unet3d";
  c.volumes = 2;
  c.test_volumes = 1;
  c.volume_size = 32;
  c.patch = 16;
  EXPECT_EQ(make_workload(c)->train_size(), 1);
}

}  // namespace
}  // namespace quartet::workloads

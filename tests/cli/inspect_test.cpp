// `quartet inspect`: what the readers make of a NIfTI image or a DICOM series folder, and
// their refusals of forged files: exit code 2 and one line naming the file, the field,
// what it holds and what is allowed.

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "medical3d/nifti.h"
#include "tests/cli/cli_util.h"
#include "tests/medical3d/dicom_files.h"
#include "tests/medical3d/nifti_files.h"

namespace {

namespace fs = std::filesystem;
using namespace quartet;
using cli_util::expect_exit2_with;
using cli_util::file_bytes;
using cli_util::quartet;
using cli_util::Result;
using medical3d::testing::patched_nifti1;
using medical3d::testing::write_gzipped;

#define EXPECT_SAYS(text, fragment) EXPECT_NE((text).find(fragment), std::string::npos) << (text)

class InspectCli : public cli_util::FolderTest {
 protected:
  InspectCli() : FolderTest("cli_inspect") {}

  // A 5x4x3 image whose voxels count 0 to 59, x fastest.
  static medical3d::Volume counting_volume(const medical3d::Mat3& direction = {1, 0, 0, 0, 1, 0, 0, 0, 1}) {
    medical3d::Volume v(medical3d::Grid{.dims = {5, 4, 3}, .spacing = {0.7, 1.25, 2.5}, .origin = {1, 2, 3},
                                        .direction = direction});
    for (size_t i = 0; i < v.voxels.size(); ++i) v.voxels[i] = static_cast<float>(i);
    return v;
  }
};

TEST_F(InspectCli, NiftiShowsShapeSpacingOrientationDatatypeAndValues) {
  const std::string p = (dir_ / "v.nii.gz").string();
  medical3d::write_nifti(p, counting_volume());
  const Result r = quartet({"inspect", p}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_SAYS(r.out, p + ": NIfTI-1 image, gzipped\n");
  EXPECT_SAYS(r.out, "  shape        5 x 4 x 3 voxels (x, y, z), 60 in all\n");
  EXPECT_SAYS(r.out, "  spacing      0.7 x 1.25 x 2.5 mm\n");
  EXPECT_SAYS(r.out, "  origin       1, 2, 3 mm (LPS)\n");
  EXPECT_SAYS(r.out, "  orientation  LPS; direction columns x, y, z: 1 0 0 / 0 1 0 / 0 0 1\n");
  EXPECT_SAYS(r.out, "  datatype     float32 (4 bytes a voxel), scl_slope 1, scl_inter 0\n");
  EXPECT_SAYS(r.out, "  geometry     from the sform (sform_code 1, scanner)\n");
  EXPECT_SAYS(r.out, "  values       min 0, max 59, mean 29.5, std 17.3181\n");
}

// RAS+ as most NIfTI tools write it: x towards the right, y towards anterior.
TEST_F(InspectCli, OrientationNamesWhereEachAxisPoints) {
  const std::string p = (dir_ / "ras.nii").string();
  medical3d::write_nifti(p, counting_volume({-1, 0, 0, 0, -1, 0, 0, 0, 1}));
  const Result r = quartet({"inspect", p}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_SAYS(r.out, "  orientation  RAS;");
}

// Coronal CT slices, stored value 10 k in slice k: -1024, -1004 and -984 HU.
TEST_F(InspectCli, DicomSeriesShowsItsGridAndHounsfieldUnits) {
  const fs::path folder = dir_ / "series";
  fs::create_directory(folder);
  for (int k = 0; k < 3; ++k) {
    medical3d::testing::SliceSpec s;
    s.position = {-50, -20 + 3.0 * k, 100};
    s.pixels.assign(size_t{s.rows} * s.cols, static_cast<uint16_t>(10 * k));
    medical3d::testing::write_slice((folder / ("IM" + std::to_string(k))).string(), s);
  }
  const Result r = quartet({"inspect", folder.string()}, dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_SAYS(r.out, folder.string() + ": DICOM series " + medical3d::testing::kSeries + " (CT), 3 slices\n");
  EXPECT_SAYS(r.out, "  shape        6 x 5 x 3 voxels (x, y, z), 90 in all\n");
  EXPECT_SAYS(r.out, "  spacing      0.6 x 0.8 x 3 mm\n");
  EXPECT_SAYS(r.out, "  orientation  LIP;");
  EXPECT_SAYS(r.out, "  datatype     int16 stored values, times RescaleSlope plus RescaleIntercept\n");
  EXPECT_SAYS(r.out, "  values       min -1024, max -984, mean -1004, std 16.3299 (HU)\n");
}

// Forged files through the CLI: each refusal is exit code 2 and one line.
class InspectHostile : public InspectCli {
 protected:
  // A good image's .nii bytes with its header changed by `patch`, written as `name`
  // (gzipped when it ends in .gz); returns its path.
  std::string forge(const std::function<void(nifti_1_header&)>& patch, const std::string& name = "bad.nii") {
    const fs::path good = dir_ / "good.nii", p = dir_ / name;
    medical3d::write_nifti(good.string(), counting_volume());
    const std::string bytes = patched_nifti1(file_bytes(good), patch);
    if (name.ends_with(".gz"))
      write_gzipped(p.string(), bytes);
    else
      medical3d::testing::write_bytes(p.string(), bytes);
    return p.string();
  }

  // `quartet inspect path args...`: exit code 2, one line "quartet: PATH: ...FRAGMENT...".
  void expect_refused(const std::string& path, const std::string& fragment, std::vector<std::string> args = {}) {
    args.insert(args.begin(), {"inspect", path});
    const Result r = quartet(args, dir_);
    expect_exit2_with(r, "quartet: " + path + ": ");
    EXPECT_SAYS(r.out, fragment);
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
};

TEST_F(InspectHostile, VoxOffsetPastTheEndOrNegativeIsRefused) {
  expect_refused(forge([](nifti_1_header& h) { h.vox_offset = 1e12f; }),
                 "vox_offset is 1e+12, past the end of the file (592 bytes); allowed: 348 (the header's size) to 352");
  expect_refused(forge([](nifti_1_header& h) { h.vox_offset = -352; }),
                 "vox_offset is -352; allowed: a whole number of bytes, 348 (the header's size) to 352");
}

TEST_F(InspectHostile, BadSpacingIsRefused) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect_refused(forge([&](nifti_1_header& h) { h.pixdim[1] = nan; }),
                 "pixdim[1] (the spacing along x) is nan; allowed: a finite spacing > 0 mm");
  expect_refused(forge([](nifti_1_header& h) { h.pixdim[2] = 0; }, "z.nii.gz"),
                 "pixdim[2] (the spacing along y) is 0; allowed: a finite spacing > 0 mm");
  expect_refused(forge([](nifti_1_header& h) { h.pixdim[3] = -2.5f; }),
                 "pixdim[3] (the spacing along z) is -2.5; allowed: a finite spacing > 0 mm");
}

TEST_F(InspectHostile, SizesOverflowingOrOverTheLimitAreRefused) {
  const std::string good = (dir_ / "two.nii").string();
  medical3d::write_nifti(good, counting_volume(), {.nifti2 = true});
  std::string bytes = file_bytes(good);
  nifti_2_header h = medical3d::testing::header_of<nifti_2_header>(bytes);
  h.dim[1] = h.dim[2] = h.dim[3] = int64_t{1} << 30;
  std::memcpy(bytes.data(), &h, sizeof h);
  const std::string overflow = (dir_ / "overflow.nii").string();
  medical3d::testing::write_bytes(overflow, bytes);
  expect_refused(overflow, "dim[1..3] is 1073741824x1073741824x1073741824, 1.23794003928538e+27 voxels; allowed: "
                           "at most ");
  expect_refused(forge([](nifti_1_header& h1) { h1.dim[1] = h1.dim[2] = h1.dim[3] = 1100; }),
                 "dim[1..3] is 1100x1100x1100, 1331000000 voxels; allowed: at most ");
  expect_refused(forge([](nifti_1_header&) {}, "fine.nii"),
                 "dim[1..3] is 5x4x3, 60 voxels; allowed: at most 50 voxels (--max-voxels)", {"--max-voxels", "50"});
}

TEST_F(InspectHostile, TruncatedDataIsRefused) {
  expect_refused(forge([](nifti_1_header& h) { h.dim[3] = 4; }),
                 "truncated: header promises 5x4x4 float32 voxels (320 bytes) from byte 352 but the file holds only "
                 "240");
  const std::string whole = forge([](nifti_1_header&) {}, "whole.nii.gz");
  const std::string cut = (dir_ / "cut.nii.gz").string();
  const std::string gz = file_bytes(whole);
  medical3d::testing::write_bytes(cut, gz.substr(0, gz.size() / 2));
  expect_refused(cut, "truncated");
}

// A 210 KB .nii.gz of 600^3 zero bytes: refused from its header, in moments. A tiny one
// claiming more than deflate can expand it to is refused before it is decompressed.
TEST_F(InspectHostile, GzipBombsAreRefusedBeforeDecompressing) {
  const std::string header = patched_nifti1(file_bytes(forge([](nifti_1_header&) {})).substr(0, 352),
                                            [](nifti_1_header& h) {
                                              h.dim[1] = h.dim[2] = h.dim[3] = 600;
                                              h.datatype = DT_UINT8;
                                              h.bitpix = 8;
                                            });
  const std::string bomb = (dir_ / "bomb.nii.gz").string();
  ASSERT_NO_FATAL_FAILURE(medical3d::testing::write_gzip_bomb(bomb, header, int64_t{600} * 600 * 600));
  ASSERT_LT(fs::file_size(bomb), 300u * 1024);
  const auto start = std::chrono::steady_clock::now();
  expect_refused(bomb, "dim[1..3] is 600x600x600, 216000000 voxels; allowed: at most 134217728 voxels (--max-voxels)",
                 {"--max-voxels", "134217728"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));

  expect_refused(forge([](nifti_1_header& h) { h.dim[1] = h.dim[2] = h.dim[3] = 400; }, "claims.nii.gz"),
                 "header promises 400x400x400 float32 voxels (256000000 bytes) from byte 352, more than ");
}

TEST_F(InspectHostile, DicomSliceWithZeroSpacingIsRefused) {
  const fs::path folder = dir_ / "series";
  fs::create_directory(folder);
  medical3d::testing::SliceSpec s;
  s.pixel_spacing = "0\\0.6";
  s.pixels.assign(size_t{s.rows} * s.cols, 0);
  medical3d::testing::write_slice((folder / "IM0").string(), s);
  const Result r = quartet({"inspect", folder.string()}, dir_);
  expect_exit2_with(r, "quartet: " + (folder / "IM0").string() +
                           ": PixelSpacing is 0\\0.6; allowed: two finite spacings > 0 mm");
}

// A slice of 8,000 nested sequences (289 KB, made here) crashed inspect with a stack
// overflow in DCMTK's parser (exit 139): it is refused, exit 2, naming the file.
TEST_F(InspectHostile, DicomSliceWithDeeplyNestedSequencesIsRefused) {
  const fs::path folder = dir_ / "series";
  fs::create_directory(folder);
  medical3d::testing::SliceSpec s;
  s.pixels.assign(size_t{s.rows} * s.cols, 0);
  const std::string slice = (folder / "IM0").string();
  medical3d::testing::write_slice(slice, s);
  medical3d::testing::write_bytes(slice,
                                  medical3d::testing::with_nested_sequences(medical3d::testing::read_bytes(slice), 8000));
  ASSERT_GT(fs::file_size(slice), 280'000u);
  const Result r = quartet({"inspect", folder.string()}, dir_);
  expect_exit2_with(r, "quartet: " + slice + ": sequences nest ");
  EXPECT_SAYS(r.out, "allowed: at most 32");
}

}  // namespace

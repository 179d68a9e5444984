#include "medical3d/dicom.h"

#include <gtest/gtest.h>

#include <limits>

#include "tests/medical3d/dicom_files.h"
#include "tests/medical3d/test_dir.h"

namespace quartet::medical3d {
namespace {

using testing::kSeries;
using testing::read_bytes;
using testing::SliceSpec;
using testing::thrown_message;
using testing::with_nested_sequences;
using testing::write_bytes;
using testing::write_slice;

// The stored value of slice k at (row r, column c): signed, negative for some.
int16_t stored(int k, int r, int c) { return static_cast<int16_t>(k * 100 + r * 10 + c - 300); }

class Dicom : public testing::TestDir {
 protected:
  static constexpr int kSlices = 8;
  // File names in an order unrelated to the slice positions.
  static constexpr int kNameOf[kSlices] = {5, 2, 7, 0, 3, 6, 1, 4};

  // Slice k sits 3 mm further along the normal (+y for this coronal orientation).
  SliceSpec slice(int k) const {
    SliceSpec s;
    s.position = {-50, -20 + 3.0 * k, 100};
    for (int r = 0; r < s.rows; ++r)
      for (int c = 0; c < s.cols; ++c) s.pixels.push_back(static_cast<uint16_t>(stored(k, r, c)));
    return s;
  }
  std::string slice_path(int k) const { return path("IM" + std::to_string(kNameOf[k])); }
  void write_series() {
    for (int k = 0; k < kSlices; ++k) write_slice(slice_path(k), slice(k));
  }
};

TEST_F(Dicom, ShuffledSeriesComesBackInPositionOrderInHounsfieldUnits) {
  write_series();
  const DicomSeries s = read_dicom_series(dir_.string());
  const Volume& v = s.volume;
  ASSERT_EQ(v.grid.dims, (Dims3{6, 5, kSlices}));
  for (int k = 0; k < kSlices; ++k)
    for (int r = 0; r < 5; ++r)
      for (int c = 0; c < 6; ++c) ASSERT_EQ(v.at(c, r, k), 2.0f * stored(k, r, c) - 1024) << k << " " << r << " " << c;
}

TEST_F(Dicom, FilesAreListedInVolumeOrder) {
  write_series();
  const DicomSeries s = read_dicom_series(dir_.string());
  ASSERT_EQ(s.files.size(), size_t{kSlices});
  for (int k = 0; k < kSlices; ++k) EXPECT_EQ(s.files[k], slice_path(k));
  EXPECT_EQ(s.series_uid, kSeries);
  EXPECT_TRUE(s.notes.empty());
}

TEST_F(Dicom, GeometryComesFromOrientationPositionsAndPixelSpacing) {
  write_series();
  const Grid g = read_dicom_series(dir_.string()).volume.grid;
  EXPECT_DOUBLE_EQ(g.spacing[0], 0.6);  // between columns
  EXPECT_DOUBLE_EQ(g.spacing[1], 0.8);  // between rows
  EXPECT_NEAR(g.spacing[2], 3.0, 1e-9);
  EXPECT_EQ(g.origin, (Vec3{-50, -20, 100}));
  // Columns: row cosine, column cosine, their cross product.
  const Mat3 expected{1, 0, 0, 0, 0, 1, 0, -1, 0};
  for (int i = 0; i < 9; ++i) EXPECT_DOUBLE_EQ(g.direction[i], expected[i]) << i;
}

TEST_F(Dicom, AbsentRescaleSlopeMeansOne) {
  for (int k = 0; k < 2; ++k) {
    SliceSpec s = slice(k);
    s.slope.reset();
    write_slice(slice_path(k), s);
  }
  const Volume v = read_dicom_series(dir_.string()).volume;
  EXPECT_EQ(v.at(2, 3, 1), stored(1, 3, 2) - 1024.0f);
}

TEST_F(Dicom, AbsentRescaleInterceptMeansZero) {
  SliceSpec s = slice(0);
  s.intercept.reset();
  write_slice(slice_path(0), s);
  EXPECT_EQ(read_dicom_series(dir_.string()).volume.at(1, 1, 0), 2.0f * stored(0, 1, 1));
}

TEST_F(Dicom, SignedValuesAreSignExtendedFromBitsStored) {
  SliceSpec s = slice(0);
  s.bits_stored = 12;
  s.slope = "1";
  s.intercept = "0";
  s.pixels[0] = static_cast<uint16_t>(-100);  // two's complement in 16 bits
  s.pixels[1] = 0xf000 | 0x0123;              // junk above bit 11, value 0x123
  write_slice(slice_path(0), s);
  const Volume v = read_dicom_series(dir_.string()).volume;
  EXPECT_EQ(v.voxels[0], -100.0f);
  EXPECT_EQ(v.voxels[1], 291.0f);
}

TEST_F(Dicom, UnsignedValuesUseTheFullRange) {
  SliceSpec s = slice(0);
  s.pixel_representation = 0;
  s.slope = "1";
  s.intercept = "0";
  s.pixels[0] = 40000;
  write_slice(slice_path(0), s);
  EXPECT_EQ(read_dicom_series(dir_.string()).volume.voxels[0], 40000.0f);
}

TEST_F(Dicom, OneSliceTakesItsThicknessAsSpacing) {
  SliceSpec s = slice(0);
  s.thickness = "2.5";
  write_slice(slice_path(0), s);
  EXPECT_DOUBLE_EQ(read_dicom_series(dir_.string()).volume.grid.spacing[2], 2.5);
}

TEST_F(Dicom, NonDicomFilesAreSkippedWithANote) {
  write_series();
  write_bytes(path("README.txt"), "scanned on tuesday\n");
  const DicomSeries s = read_dicom_series(dir_.string());
  EXPECT_EQ(s.volume.grid.dims[2], kSlices);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_NE(s.notes[0].find("skipped README.txt: not a DICOM file"), std::string::npos) << s.notes[0];
}

TEST_F(Dicom, SeveralSeriesAreRefusedListingTheirUids) {
  write_series();
  SliceSpec other = slice(0);
  other.series_uid = "1.2.3.4.5";
  write_slice(path("scout"), other);
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_NE(msg.find("holds 2 series; name the one to read"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::string(kSeries) + " (8 slices)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1.2.3.4.5 (1 slices)"), std::string::npos) << msg;
}

TEST_F(Dicom, SeriesUidPicksOneSeries) {
  write_series();
  SliceSpec other = slice(0);
  other.series_uid = "1.2.3.4.5";
  write_slice(path("scout"), other);
  EXPECT_EQ(read_dicom_series(dir_.string(), kSeries).volume.grid.dims[2], kSlices);
  EXPECT_EQ(read_dicom_series(dir_.string(), "1.2.3.4.5").volume.grid.dims[2], 1);
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string(), "9.9"); });
  EXPECT_NE(msg.find("no series 9.9"), std::string::npos) << msg;
}

// Slice 3 is IM0, the first file by name: the message still blames it, not the others.
TEST_F(Dicom, InconsistentSliceSizeNamesTheOddSlice) {
  write_series();
  SliceSpec odd = slice(3);
  odd.cols = 7;
  odd.pixels.assign(size_t{odd.rows} * odd.cols, 0);
  write_slice(slice_path(3), odd);
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_NE(msg.find(slice_path(3) + ": slice is 7x5 (Columns x Rows) but IM1 has 6x5"), std::string::npos) << msg;
}

TEST_F(Dicom, InconsistentPixelSpacingNamesTheSlice) {
  write_series();
  SliceSpec odd = slice(6);
  odd.pixel_spacing = "0.8\\0.7";
  write_slice(slice_path(6), odd);
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_NE(msg.find(slice_path(6) + ": PixelSpacing"), std::string::npos) << msg;
}

TEST_F(Dicom, InconsistentOrientationNamesTheSlice) {
  write_series();
  SliceSpec odd = slice(2);
  odd.orientation = "1\\0\\0\\0\\1\\0";
  write_slice(slice_path(2), odd);
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_NE(msg.find(slice_path(2) + ": ImageOrientationPatient differs"), std::string::npos) << msg;
}

TEST_F(Dicom, DuplicatePositionsAreRefused) {
  write_series();
  write_slice(path("copy"), slice(4));
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_NE(msg.find("same position along the slice normal"), std::string::npos) << msg;
}

TEST_F(Dicom, AMissingSliceIsRefused) {
  write_series();
  std::filesystem::remove(slice_path(5));  // between IM3 (slice 4) and IM1 (slice 6)
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_NE(msg.find(slice_path(6) + ": is 6.000000 mm from IM3 along the slice normal, but the other slices are "
                                     "3.000000 mm apart: a missing slice?"),
            std::string::npos)
      << msg;
}

TEST_F(Dicom, TruncatedSliceIsAnErrorNotASkip) {
  write_series();
  const std::string bytes = read_bytes(slice_path(7));
  write_bytes(slice_path(7), bytes.substr(0, bytes.size() - 30));
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_NE(msg.find(slice_path(7)), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(Dicom, MissingFolderIsNamed) {
  const std::string missing = path("nowhere");
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(missing); });
  EXPECT_EQ(msg, missing + ": no such folder");
}

TEST_F(Dicom, FolderWithoutSlicesSaysSo) {
  write_bytes(path("a.txt"), "not dicom");
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_NE(msg.find("no DICOM image slices among its 1 files"), std::string::npos) << msg;
}

// Slices from anywhere: a spacing that is not finite and > 0, or a series larger than the
// limit, is refused naming the slice or the folder before any pixel data is read.
using DicomHostile = Dicom;

TEST_F(DicomHostile, ZeroOrNegativePixelSpacingNamesTheSlice) {
  write_series();
  for (const std::string bad : {"0\\0.6", "0.8\\-0.6"}) {
    SliceSpec odd = slice(2);
    odd.pixel_spacing = bad;
    write_slice(slice_path(2), odd);
    const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
    EXPECT_NE(msg.find(slice_path(2) + ": PixelSpacing is "), std::string::npos) << msg;
    EXPECT_NE(msg.find("; allowed: two finite spacings > 0 mm"), std::string::npos) << msg;
  }
}

TEST_F(DicomHostile, ZeroSliceThicknessOfOneSliceIsRefused) {
  SliceSpec s = slice(0);
  s.thickness = "0";
  write_slice(slice_path(0), s);
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_EQ(msg, slice_path(0) + ": SliceThickness is 0; allowed: a finite thickness > 0 mm");
}

TEST_F(DicomHostile, MoreVoxelsThanTheLimitAreRefusedBeforeReadingPixels) {
  write_series();
  const std::string msg = thrown_message<std::runtime_error>(
      [&] { read_dicom_series(dir_.string(), {}, ReadLimits::at_most(200, "the test's limit")); });
  EXPECT_EQ(msg, dir_.string() + ": series " + kSeries +
                     " is 6x5 (Columns x Rows) x 8 slices, 240 voxels; allowed: at most 200 voxels (the test's limit)");
}

// DCMTK parses a sequence by recursion: a slice of 8,000 nested sequences (289 KB)
// overflowed the stack. It is refused naming the file, as is one with more items than a
// slice needs, while a few levels of nesting read as before.
TEST_F(DicomHostile, DeeplyNestedSequencesAreRefusedNamingTheSlice) {
  write_series();
  write_bytes(slice_path(3), with_nested_sequences(read_bytes(slice_path(3)), 8000));
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_NE(msg.find(slice_path(3) + ": sequences nest "), std::string::npos) << msg;
  EXPECT_NE(msg.find(" deep; allowed: at most 32"), std::string::npos) << msg;
}

TEST_F(DicomHostile, AFewNestedSequencesReadAsBefore) {
  write_series();
  for (int k = 0; k < kSlices; ++k) write_bytes(slice_path(k), with_nested_sequences(read_bytes(slice_path(k)), 3));
  const DicomSeries s = read_dicom_series(dir_.string());
  EXPECT_EQ(s.volume.grid.dims, (Dims3{6, 5, kSlices}));
  EXPECT_FLOAT_EQ(s.volume.voxels[0], 2.0f * stored(0, 0, 0) - 1024.0f);
}

TEST_F(DicomHostile, MoreSequenceItemsThanASliceHoldsAreRefused) {
  write_series();
  write_bytes(slice_path(1), with_nested_sequences(read_bytes(slice_path(1)), 1, 20000));
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_EQ(msg, slice_path(1) + ": holds 20000 sequence items; allowed: at most 10000 (an image slice holds a few)");
}

TEST_F(DicomHostile, ADeflatedDataSetIsRefusedNamingTheSlice) {
  write_series();
  std::string bytes = read_bytes(slice_path(4));
  const std::string explicit_le = "1.2.840.10008.1.2.1";
  const size_t at = bytes.find(explicit_le);
  ASSERT_NE(at, std::string::npos);
  // The meta header's transfer syntax, as long as the deflated one's UID: "…1.2.1.99" fits
  // the value's even length only with its padding byte, so the whole element is rewritten.
  const std::string deflated = "1.2.840.10008.1.2.1.99";
  bytes.replace(at, explicit_le.size() + 1, deflated);
  bytes[at - 2] = static_cast<char>(deflated.size());
  write_bytes(slice_path(4), bytes);
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_NE(msg.find(slice_path(4) + ": a deflated data set"), std::string::npos) << msg;
}

// A position or orientation that is not a number cannot place the slice: refused naming
// the tag, not sorted as if it were in order.
TEST_F(DicomHostile, NonFiniteGeometryNamesTheTag) {
  write_series();
  SliceSpec odd = slice(4);
  odd.position = {-50, std::numeric_limits<double>::quiet_NaN(), 100};
  write_slice(slice_path(4), odd);
  std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_NE(msg.find(slice_path(4) + ": ImagePositionPatient[1] is "), std::string::npos) << msg;
  EXPECT_NE(msg.find("nan; allowed: three finite coordinates in mm"), std::string::npos) << msg;

  write_series();
  odd = slice(5);
  odd.orientation = "1\\0\\0\\0\\inf\\-1";
  write_slice(slice_path(5), odd);
  msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_NE(msg.find(slice_path(5) + ": ImageOrientationPatient[4] is inf"), std::string::npos) << msg;
}

// RescaleSlope 1e39 makes every voxel infinite as a float: refused with both fields named.
TEST_F(DicomHostile, ARescaleBeyondFloatsRangeIsRefused) {
  write_series();
  SliceSpec odd = slice(6);
  odd.slope = "1e39";
  write_slice(slice_path(6), odd);
  const std::string msg = thrown_message<std::runtime_error>([&] { read_dicom_series(dir_.string()); });
  EXPECT_NE(msg.find(slice_path(6) + ": RescaleSlope 1e+39 and RescaleIntercept -1024 turn stored values -32768 to "
                                     "32767 into"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("allowed: a rescale that keeps them within a float's range"), std::string::npos) << msg;
}

}  // namespace
}  // namespace quartet::medical3d

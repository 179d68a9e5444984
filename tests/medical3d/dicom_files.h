#pragma once

// DICOM slices as a scanner writes them, for the tests that read them (medical3d, and
// `quartet inspect`'s).

#include <dcmtk/config/osconfig.h>  // must come first
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcuid.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace quartet::medical3d::testing {

inline constexpr const char* kSeries = "1.2.826.0.1.3680043.9.7777.1";

// One CT slice as a scanner would write it. Defaults: 6 columns x 5 rows, coronal.
struct SliceSpec {
  std::string series_uid = kSeries;
  uint16_t rows = 5, cols = 6;
  std::string pixel_spacing = "0.8\\0.6";         // between rows \ between columns
  std::string orientation = "1\\0\\0\\0\\0\\-1";  // row cosine (+x), column cosine (-z)
  std::array<double, 3> position{};
  std::optional<std::string> slope = "2", intercept = "-1024";
  uint16_t bits_stored = 16, pixel_representation = 1;
  std::vector<uint16_t> pixels;  // rows * cols stored values
  std::optional<std::string> thickness;
};

inline std::string ds_triplet(const std::array<double, 3>& p) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%g\\%g\\%g", p[0], p[1], p[2]);
  return buf;
}

inline void write_slice(const std::string& path, const SliceSpec& s) {
  DcmFileFormat file;
  DcmDataset* ds = file.getDataset();
  char uid[100];
  ASSERT_TRUE(ds->putAndInsertString(DCM_SOPClassUID, UID_CTImageStorage).good());
  ASSERT_TRUE(
      ds->putAndInsertString(DCM_SOPInstanceUID, dcmGenerateUniqueIdentifier(uid, SITE_INSTANCE_UID_ROOT)).good());
  ASSERT_TRUE(ds->putAndInsertString(DCM_StudyInstanceUID, "1.2.826.0.1.3680043.9.7777").good());
  ASSERT_TRUE(ds->putAndInsertString(DCM_SeriesInstanceUID, s.series_uid.c_str()).good());
  ASSERT_TRUE(ds->putAndInsertString(DCM_Modality, "CT").good());
  ASSERT_TRUE(ds->putAndInsertUint16(DCM_Rows, s.rows).good());
  ASSERT_TRUE(ds->putAndInsertUint16(DCM_Columns, s.cols).good());
  ASSERT_TRUE(ds->putAndInsertString(DCM_PixelSpacing, s.pixel_spacing.c_str()).good());
  ASSERT_TRUE(ds->putAndInsertString(DCM_ImageOrientationPatient, s.orientation.c_str()).good());
  ASSERT_TRUE(ds->putAndInsertString(DCM_ImagePositionPatient, ds_triplet(s.position).c_str()).good());
  if (s.thickness) {
    ASSERT_TRUE(ds->putAndInsertString(DCM_SliceThickness, s.thickness->c_str()).good());
  }
  ASSERT_TRUE(ds->putAndInsertUint16(DCM_SamplesPerPixel, 1).good());
  ASSERT_TRUE(ds->putAndInsertString(DCM_PhotometricInterpretation, "MONOCHROME2").good());
  ASSERT_TRUE(ds->putAndInsertUint16(DCM_BitsAllocated, 16).good());
  ASSERT_TRUE(ds->putAndInsertUint16(DCM_BitsStored, s.bits_stored).good());
  ASSERT_TRUE(ds->putAndInsertUint16(DCM_HighBit, s.bits_stored - 1).good());
  ASSERT_TRUE(ds->putAndInsertUint16(DCM_PixelRepresentation, s.pixel_representation).good());
  if (s.slope) {
    ASSERT_TRUE(ds->putAndInsertString(DCM_RescaleSlope, s.slope->c_str()).good());
  }
  if (s.intercept) {
    ASSERT_TRUE(ds->putAndInsertString(DCM_RescaleIntercept, s.intercept->c_str()).good());
  }
  ASSERT_EQ(s.pixels.size(), size_t{s.rows} * s.cols);
  ASSERT_TRUE(ds->putAndInsertUint16Array(DCM_PixelData, s.pixels.data(), s.pixels.size()).good());
  ASSERT_TRUE(file.saveFile(path.c_str(), EXS_LittleEndianExplicit).good());
}

// `bytes` of a slice write_slice wrote (explicit VR little endian) with a
// ReferencedImageSequence (0008,1140) inserted where it belongs: `depth` sequences nested
// in one another, each of undefined length with one item, the innermost holding
// `items` empty items. As a hostile file nests them: 20 bytes a level.
inline std::string with_nested_sequences(const std::string& bytes, int depth, int items = 1) {
  static const std::string sq("\x08\x00\x40\x11SQ\x00\x00\xFF\xFF\xFF\xFF", 12);
  static const std::string item("\xFE\xFF\x00\xE0\xFF\xFF\xFF\xFF", 8);
  static const std::string item_end("\xFE\xFF\x0D\xE0\x00\x00\x00\x00", 8);
  static const std::string sq_end("\xFE\xFF\xDD\xE0\x00\x00\x00\x00", 8);
  std::string chain;
  for (int d = 0; d < depth; ++d) chain += sq + (d + 1 < depth ? item : "");
  for (int i = 0; i < items; ++i) chain += item + item_end;
  for (int d = 0; d < depth; ++d) chain += sq_end + (d + 1 < depth ? item_end : "");
  // Before StudyInstanceUID (0020,000D), the first element past group 0008 that write_slice writes.
  const size_t at = bytes.find(std::string("\x20\x00\x0D\x00UI", 6));
  if (at == std::string::npos) {
    ADD_FAILURE() << "no StudyInstanceUID in the slice";
    return bytes;
  }
  return bytes.substr(0, at) + chain + bytes.substr(at);
}

}  // namespace quartet::medical3d::testing

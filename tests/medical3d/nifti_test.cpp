#include "medical3d/nifti.h"

#include <gtest/gtest.h>
#include <nifti2_io.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <ostream>

#include "engine/random.h"
#include "tests/medical3d/nifti_files.h"
#include "tests/medical3d/test_dir.h"

namespace quartet::medical3d {
namespace {

using testing::header_of;
using testing::read_bytes;
using testing::thrown_message;
using testing::write_bytes;
using testing::write_with_libnifti;

// An oblique, anisotropic grid: rotations about z (30 degrees) and x (10 degrees).
Grid oblique_grid() {
  Grid g;
  g.dims = {5, 4, 3};
  g.spacing = {0.7, 1.25, 2.5};
  g.origin = {-10.5, 20.25, 3.0};
  const double a = 30 * M_PI / 180, b = 10 * M_PI / 180;
  const double rz[9] = {std::cos(a), -std::sin(a), 0, std::sin(a), std::cos(a), 0, 0, 0, 1};
  const double rx[9] = {1, 0, 0, 0, std::cos(b), -std::sin(b), 0, std::sin(b), std::cos(b)};
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) {
      double s = 0;
      for (int k = 0; k < 3; ++k) s += rz[3 * r + k] * rx[3 * k + c];
      g.direction[3 * r + c] = s;
    }
  return g;
}

Volume test_volume() {
  Volume v(oblique_grid());
  for (size_t i = 0; i < v.voxels.size(); ++i) v.voxels[i] = static_cast<float>(i) * 0.37f - 3.5f;
  return v;
}

void expect_same_geometry(const Grid& a, const Grid& b, double tol = 1e-5) {
  EXPECT_EQ(a.dims, b.dims);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(a.spacing[i], b.spacing[i], tol) << "spacing " << i;
    EXPECT_NEAR(a.origin[i], b.origin[i], tol) << "origin " << i;
  }
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(a.direction[i], b.direction[i], tol) << "direction " << i;
}

// The same file with every header field and voxel byte-swapped: a big-endian file on a
// little-endian host (libnifti only writes the host's order).
std::string to_other_byte_order(std::string bytes) {
  int64_t offset;
  int bytes_per_voxel;
  if (header_of<nifti_1_header>(bytes).sizeof_hdr == 348) {
    nifti_1_header h = header_of<nifti_1_header>(bytes);
    offset = static_cast<int64_t>(h.vox_offset);
    bytes_per_voxel = h.bitpix / 8;
    swap_nifti_header(&h, 1);
    std::memcpy(bytes.data(), &h, sizeof h);
  } else {
    nifti_2_header h = header_of<nifti_2_header>(bytes);
    if (bytes.size() < sizeof h) return bytes;
    offset = h.vox_offset;
    bytes_per_voxel = h.bitpix / 8;
    swap_nifti_header(&h, 2);
    std::memcpy(bytes.data(), &h, sizeof h);
  }
  for (size_t i = static_cast<size_t>(offset); i + bytes_per_voxel <= bytes.size(); i += bytes_per_voxel)
    std::reverse(bytes.begin() + static_cast<std::ptrdiff_t>(i),
                 bytes.begin() + static_cast<std::ptrdiff_t>(i) + bytes_per_voxel);
  return bytes;
}

class Nifti : public testing::TestDir {};

struct Format {
  const char* ext;
  bool nifti2;
};

// gtest prints the parameter into the test's name: the format, not the pointer's bytes.
void PrintTo(const Format& f, std::ostream* out) { *out << (f.nifti2 ? "NIfTI-2 " : "NIfTI-1 ") << f.ext; }

class NiftiRoundTrip : public testing::TestDir, public ::testing::WithParamInterface<Format> {};

TEST_P(NiftiRoundTrip, KeepsDataSpacingAndOrientation) {
  const Volume v = test_volume();
  const std::string p = path(std::string("image") + GetParam().ext);
  write_nifti(p, v, {.nifti2 = GetParam().nifti2});
  const Volume back = read_nifti(p);
  expect_same_geometry(back.grid, v.grid);
  EXPECT_EQ(back.voxels, v.voxels);
}

TEST_P(NiftiRoundTrip, WritesTheRequestedVersionAndCompression) {
  const std::string p = path(std::string("image") + GetParam().ext);
  write_nifti(p, test_volume(), {.nifti2 = GetParam().nifti2});
  const std::string bytes = read_bytes(p);
  ASSERT_GT(bytes.size(), 4u);
  const bool gz = std::string(GetParam().ext) == ".nii.gz";
  EXPECT_EQ(static_cast<uint8_t>(bytes[0]) == 0x1f && static_cast<uint8_t>(bytes[1]) == 0x8b, gz);
  if (!gz) {
    EXPECT_EQ(header_of<nifti_1_header>(bytes).sizeof_hdr, GetParam().nifti2 ? 540 : 348);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, NiftiRoundTrip,
                         ::testing::Values(Format{".nii", false}, Format{".nii.gz", false}, Format{".nii", true},
                                           Format{".nii.gz", true}),
                         [](const auto& info) {
                           return std::string(info.param.nifti2 ? "Nifti2" : "Nifti1") +
                                  (std::string(info.param.ext) == ".nii" ? "Plain" : "Gzip");
                         });

TEST_F(Nifti, ReadsBigEndianNifti1) {
  const Volume v = test_volume();
  write_nifti(path("little.nii"), v);
  const std::string big = to_other_byte_order(read_bytes(path("little.nii")));
  ASSERT_EQ(big.substr(0, 4), std::string("\x00\x00\x01\x5c", 4));  // sizeof_hdr 348, most significant byte first
  write_bytes(path("big.nii"), big);
  const Volume back = read_nifti(path("big.nii"));
  expect_same_geometry(back.grid, v.grid);
  EXPECT_EQ(back.voxels, v.voxels);
}

TEST_F(Nifti, ReadsBigEndianNifti2) {
  const Volume v = test_volume();
  write_nifti(path("little.nii"), v, {.nifti2 = true});
  const std::string big = to_other_byte_order(read_bytes(path("little.nii")));
  ASSERT_EQ(big.substr(0, 4), std::string("\x00\x00\x02\x1c", 4));  // sizeof_hdr 540
  write_bytes(path("big.nii"), big);
  const Volume back = read_nifti(path("big.nii"));
  expect_same_geometry(back.grid, v.grid);
  EXPECT_EQ(back.voxels, v.voxels);
}

TEST_F(Nifti, LabelsRoundTripAsUint8) {
  LabelVolume labels(oblique_grid());
  for (size_t i = 0; i < labels.voxels.size(); ++i) labels.voxels[i] = static_cast<uint8_t>(i % 3);
  write_nifti(path("mask.nii.gz"), labels);
  const LabelVolume back = read_nifti_labels(path("mask.nii.gz"));
  EXPECT_EQ(back.voxels, labels.voxels);
  expect_same_geometry(back.grid, labels.grid);

  write_nifti(path("mask.nii"), labels);
  EXPECT_EQ(header_of<nifti_1_header>(read_bytes(path("mask.nii"))).datatype, DT_UINT8);
}

template <class T>
void fill_ramp(nifti_image& nim) {
  T* p = static_cast<T*>(nim.data);
  for (int64_t i = 0; i < nim.nvox; ++i) p[i] = static_cast<T>(i);
}

TEST_F(Nifti, ReadsEveryRealDatatypeAndAppliesSlopeAndIntercept) {
  const std::vector<std::pair<int, std::function<void(nifti_image&)>>> types = {
      {DT_UINT8, fill_ramp<uint8_t>},   {DT_INT8, fill_ramp<int8_t>},     {DT_UINT16, fill_ramp<uint16_t>},
      {DT_INT16, fill_ramp<int16_t>},   {DT_UINT32, fill_ramp<uint32_t>}, {DT_INT32, fill_ramp<int32_t>},
      {DT_UINT64, fill_ramp<uint64_t>}, {DT_INT64, fill_ramp<int64_t>},   {DT_FLOAT32, fill_ramp<float>},
      {DT_FLOAT64, fill_ramp<double>}};
  for (const auto& [dt, fill] : types) {
    SCOPED_TRACE(nifti_datatype_string(dt));
    const std::string p = path(std::string("t") + std::to_string(dt) + ".nii.gz");
    write_with_libnifti(p, {4, 3, 5}, dt, [&, fill = fill](nifti_image& nim) {
      fill(nim);
      nim.scl_slope = 2;
      nim.scl_inter = -1024;
    });
    const Volume v = read_nifti(p);
    ASSERT_EQ(v.voxels.size(), 60u);
    for (size_t i = 0; i < v.voxels.size(); ++i) ASSERT_EQ(v.voxels[i], 2.0f * static_cast<float>(i) - 1024) << i;
  }
}

TEST_F(Nifti, ZeroSlopeMeansUnscaled) {
  write_with_libnifti(path("a.nii"), {4, 3, 5}, DT_INT16, [](nifti_image& nim) {
    fill_ramp<int16_t>(nim);
    nim.scl_slope = 0;
    nim.scl_inter = 7;
  });
  const Volume v = read_nifti(path("a.nii"));
  for (size_t i = 0; i < v.voxels.size(); ++i) ASSERT_EQ(v.voxels[i], static_cast<float>(i));
}

// The RAS affine of `g`, as a NIfTI file holds it.
nifti_dmat44 ras_affine(const Grid& g) {
  nifti_dmat44 m{};
  const double flip[3] = {-1, -1, 1};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) m.m[r][c] = flip[r] * g.direction[3 * r + c] * g.spacing[c];
    m.m[r][3] = flip[r] * g.origin[r];
  }
  m.m[3][3] = 1;
  return m;
}

void set_qform(nifti_image& nim, const Grid& g) {
  double dx, dy, dz;
  nifti_dmat44_to_quatern(ras_affine(g), &nim.quatern_b, &nim.quatern_c, &nim.quatern_d, &nim.qoffset_x, &nim.qoffset_y,
                          &nim.qoffset_z, &dx, &dy, &dz, &nim.qfac);
  nim.dx = nim.pixdim[1] = g.spacing[0];
  nim.dy = nim.pixdim[2] = g.spacing[1];
  nim.dz = nim.pixdim[3] = g.spacing[2];
  nim.qform_code = NIFTI_XFORM_SCANNER_ANAT;
}

TEST_F(Nifti, UsesTheQformWhenThereIsNoSform) {
  const Grid g = oblique_grid();
  write_with_libnifti(path("q.nii"), {5, 4, 3}, DT_FLOAT32, [&](nifti_image& nim) {
    set_qform(nim, g);
    nim.sform_code = 0;
  });
  expect_same_geometry(read_nifti(path("q.nii")).grid, g);
}

TEST_F(Nifti, PrefersTheSformToTheQform) {
  const Grid g = oblique_grid();
  Grid other = g;
  other.origin = {1, 2, 3};
  other.spacing = {3, 3, 3};
  write_with_libnifti(path("s.nii"), {5, 4, 3}, DT_FLOAT32, [&](nifti_image& nim) {
    set_qform(nim, other);
    nim.sform_code = NIFTI_XFORM_ALIGNED_ANAT;
    nim.sto_xyz = ras_affine(g);
  });
  expect_same_geometry(read_nifti(path("s.nii")).grid, g);
}

TEST_F(Nifti, MissingFileNamesThePath) {
  const std::string p = path("absent.nii.gz");
  const std::string msg = thrown_message<std::runtime_error>([&] { read_nifti(p); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("no such file"), std::string::npos) << msg;
}

TEST_F(Nifti, TruncatedVoxelDataIsRefused) {
  write_nifti(path("full.nii"), test_volume());
  const std::string bytes = read_bytes(path("full.nii"));
  write_bytes(path("cut.nii"), bytes.substr(0, bytes.size() - 20));
  const std::string msg = thrown_message<std::runtime_error>([&] { read_nifti(path("cut.nii")); });
  EXPECT_NE(msg.find(path("cut.nii")), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("holds only 220"), std::string::npos) << msg;  // 60 floats, less 20 bytes
}

TEST_F(Nifti, TruncatedHeaderIsRefused) {
  write_nifti(path("full.nii"), test_volume());
  write_bytes(path("cut.nii"), read_bytes(path("full.nii")).substr(0, 100));
  const std::string msg = thrown_message<std::runtime_error>([&] { read_nifti(path("cut.nii")); });
  EXPECT_NE(msg.find("truncated: 100 bytes, shorter than its 348-byte NIfTI-1 header"), std::string::npos) << msg;
}

TEST_F(Nifti, TruncatedGzipIsRefused) {
  Volume big(Grid{.dims = {40, 40, 40}});
  engine::Generator gen(3);
  for (float& x : big.voxels) x = gen.normal(0, 1);  // incompressible, so a cut loses voxels
  write_nifti(path("full.nii.gz"), big);
  const std::string bytes = read_bytes(path("full.nii.gz"));
  write_bytes(path("cut.nii.gz"), bytes.substr(0, bytes.size() / 2));
  const std::string msg = thrown_message<std::runtime_error>([&] { read_nifti(path("cut.nii.gz")); });
  EXPECT_NE(msg.find(path("cut.nii.gz")), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(Nifti, FourDimensionalImageIsRefused) {
  write_with_libnifti(path("series.nii"), {4, 4, 4, 3}, DT_FLOAT32, [](nifti_image&) {});
  const std::string msg = thrown_message<std::runtime_error>([&] { read_nifti(path("series.nii")); });
  EXPECT_NE(msg.find("is a 4D image (4x4x4x3)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3D volumes only"), std::string::npos) << msg;
}

TEST_F(Nifti, FourDimensionalWithOneTimePointReads) {
  write_with_libnifti(path("one.nii"), {4, 4, 4, 1}, DT_FLOAT32, fill_ramp<float>);
  EXPECT_EQ(read_nifti(path("one.nii")).grid.dims, (Dims3{4, 4, 4}));
}

TEST_F(Nifti, ComplexVoxelsAreRefused) {
  write_with_libnifti(path("c.nii"), {4, 4, 4}, DT_COMPLEX64, [](nifti_image&) {});
  const std::string msg = thrown_message<std::runtime_error>([&] { read_nifti(path("c.nii")); });
  EXPECT_NE(msg.find("datatype is 32 (complex64); allowed: a real scalar type"), std::string::npos) << msg;
}

TEST_F(Nifti, TextFileIsNotNifti) {
  write_bytes(path("notes.nii"), std::string(400, 'x'));
  const std::string msg = thrown_message<std::runtime_error>([&] { read_nifti(path("notes.nii")); });
  EXPECT_NE(msg.find("not a NIfTI file"), std::string::npos) << msg;
}

TEST_F(Nifti, GzippedFileNamedPlainSaysSo) {
  write_nifti(path("a.nii.gz"), test_volume());
  std::filesystem::rename(path("a.nii.gz"), path("a.nii"));
  const std::string msg = thrown_message<std::runtime_error>([&] { read_nifti(path("a.nii")); });
  EXPECT_NE(msg.find("name it *.nii.gz"), std::string::npos) << msg;
}

TEST_F(Nifti, OtherExtensionsAreRefused) {
  const std::string msg = thrown_message<std::runtime_error>([&] { read_nifti(path("image.mha")); });
  EXPECT_NE(msg.find("expected a NIfTI file named *.nii or *.nii.gz"), std::string::npos) << msg;
}

TEST_F(Nifti, NonIntegerLabelsAreRefused) {
  Volume v = test_volume();
  write_nifti(path("soft.nii"), v);
  const std::string msg = thrown_message<std::runtime_error>([&] { read_nifti_labels(path("soft.nii")); });
  EXPECT_NE(msg.find("voxel (0, 0, 0) holds -3.5"), std::string::npos) << msg;
}

TEST_F(Nifti, WriterRefusesOtherNames) {
  const std::string msg = thrown_message<std::invalid_argument>([&] { write_nifti(path("a.nrrd"), test_volume()); });
  EXPECT_NE(msg.find("expected a name ending in .nii or .nii.gz"), std::string::npos) << msg;
}

TEST_F(Nifti, WriterFailsInAMissingFolderAndLeavesNothing) {
  const std::string p = path("no/such/folder/a.nii");
  const std::string msg = thrown_message<std::runtime_error>([&] { write_nifti(p, test_volume()); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST_F(Nifti, WriterReplacesAFileAndLeavesNoTemporary) {
  write_bytes(path("a.nii.gz"), "old");
  write_nifti(path("a.nii.gz"), test_volume());
  EXPECT_EQ(read_nifti(path("a.nii.gz")).voxels, test_volume().voxels);
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1);
}

TEST_F(Nifti, WriterRefusesVoxelsThatDoNotMatchTheGrid) {
  Volume v = test_volume();
  v.voxels.pop_back();
  const std::string msg = thrown_message<std::invalid_argument>([&] { write_nifti(path("a.nii"), v); });
  EXPECT_NE(msg.find("59 voxels for a grid of 60"), std::string::npos) << msg;
}

}  // namespace
}  // namespace quartet::medical3d

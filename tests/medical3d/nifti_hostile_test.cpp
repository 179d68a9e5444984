// NIfTI headers as an attacker writes them: every field the voxels or the grid depend on
// is refused with one message naming the file, the field, what it holds and what is
// allowed, before anything is allocated or read. Labelled chaos in ctest.

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>

#include "engine/random.h"
#include "medical3d/nifti.h"
#include "tests/medical3d/nifti_files.h"
#include "tests/medical3d/test_dir.h"

namespace quartet::medical3d {
namespace {

using testing::header_of;
using testing::patched_nifti1;
using testing::read_bytes;
using testing::thrown_message;
using testing::write_bytes;
using testing::write_gzipped;
using testing::write_with_libnifti;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Generous, for a loaded machine: a refusal takes milliseconds, reading what a forged
// header claims would take minutes.
constexpr auto kDeadline = std::chrono::seconds(10);

// The process's peak resident memory so far, MiB (each ctest test is a process of its own).
double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

class NiftiHostile : public testing::TestDir {
 protected:
  // A good 5x4x3 float32 image, as bytes of a plain NIfTI-1 file: 352 + 240 bytes.
  std::string good_bytes() {
    Volume v(Grid{.dims = {5, 4, 3}, .spacing = {0.7, 1.25, 2.5}});
    for (size_t i = 0; i < v.voxels.size(); ++i) v.voxels[i] = static_cast<float>(i);
    write_nifti(path("good.nii"), v);
    return read_bytes(path("good.nii"));
  }

  // The message read_nifti throws for the good image with its header patched, as .nii.
  std::string refusal(const std::function<void(nifti_1_header&)>& patch, const std::string& name = "bad.nii") {
    const std::string p = path(name);
    if (name.ends_with(".gz"))
      write_gzipped(p, patched_nifti1(good_bytes(), patch));
    else
      write_bytes(p, patched_nifti1(good_bytes(), patch));
    const std::string msg = thrown_message<std::runtime_error>([&] { read_nifti(p); });
    EXPECT_EQ(msg.rfind(p + ": ", 0), 0u) << "the message starts with the file: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
    return msg;
  }
};

#define EXPECT_SAYS(msg, fragment) EXPECT_NE((msg).find(fragment), std::string::npos) << (msg)

// libnifti casts NIfTI-1's float vox_offset to int: 1e12 became INT_MIN, then the
// header's size, and the voxels were read 4 bytes early.
TEST_F(NiftiHostile, HugeVoxOffsetIsRefusedNotReadFromTheWrongPlace) {
  const std::string msg = refusal([](nifti_1_header& h) { h.vox_offset = 1e12f; });
  EXPECT_SAYS(msg, "vox_offset is 1e+12, past the end of the file (592 bytes); allowed: 348 (the header's size) to "
                   "352 (where the 240 bytes of voxels end with the file)");
}

TEST_F(NiftiHostile, VoxOffsetPastTheEndIsRefused) {
  const std::string msg = refusal([](nifti_1_header& h) { h.vox_offset = 4096; });
  EXPECT_SAYS(msg, "vox_offset is 4096, past the end of the file (592 bytes)");
}

TEST_F(NiftiHostile, VoxOffsetLeavingTooLittleDataIsRefused) {
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.vox_offset = 400; }),
              "vox_offset is 400; allowed: 348 (the header's size) to 352 (where the 240 bytes of voxels end with the "
              "file)");
  // Too short for the voxels wherever they start: truncated.
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.dim[3] = 4; }),
              "truncated: header promises 5x4x4 float32 voxels (320 bytes) from byte 352 but the file holds only 240");
}

TEST_F(NiftiHostile, VoxOffsetInsideTheHeaderOrNotAWholeNumberIsRefused) {
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.vox_offset = 100; }), "vox_offset is 100; allowed: 348 (the header's "
                                                                       "size) to 352 (where the 240 bytes of voxels");
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.vox_offset = 352.5f; }),
              "vox_offset is 352.5; allowed: a whole number of bytes, 348");
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.vox_offset = kNaN; }), "vox_offset is nan; allowed:");
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.vox_offset = -352; }), "vox_offset is -352; allowed:");
}

// A .nii.gz is decompressed from its start: vox_offset is what it decompresses first.
TEST_F(NiftiHostile, GzippedVoxOffsetIsBoundedByTheExtensionCapAndTheData) {
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.vox_offset = 1e12f; }, "a.nii.gz"),
              "vox_offset is 1e+12; allowed: 348 (the header's size) to 67109212 (64 MiB of header extensions at "
              "most)");
  // Past what it holds: decompressed to its end, then refused.
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.vox_offset = 4096; }, "b.nii.gz"),
              "truncated: vox_offset is 4096, past the end of the decompressed data");
}

TEST_F(NiftiHostile, BadSpacingIsAnErrorNamingTheField) {
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.pixdim[1] = kNaN; }),
              "pixdim[1] (the spacing along x) is nan; allowed: a finite spacing > 0 mm");
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.pixdim[2] = 0; }), "pixdim[2] (the spacing along y) is 0; allowed:");
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.pixdim[3] = -2.5f; }), "pixdim[3] (the spacing along z) is -2.5");
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.pixdim[1] = kInf; }), "pixdim[1] (the spacing along x) is inf");
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.pixdim[2] = kNaN; }, "c.nii.gz"), "pixdim[2] (the spacing along y)");
}

// The qform and sform need no pixdim: with neither set, the spacing comes from it alone,
// and libnifti made a spacing of 0 or NaN 1 mm.
TEST_F(NiftiHostile, BadSpacingIsRefusedWithoutAnAffineToo) {
  const std::string msg = refusal([](nifti_1_header& h) {
    h.qform_code = h.sform_code = 0;
    h.pixdim[3] = 0;
  });
  EXPECT_SAYS(msg, "pixdim[3] (the spacing along z) is 0");
}

TEST_F(NiftiHostile, AnAffineInUseMustBeFinite) {
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.srow_y[3] = kNaN; }),
              "srow_y[3] is nan; allowed: a finite number (sform_code > 0: the sform is used)");
  EXPECT_SAYS(refusal([](nifti_1_header& h) {
                h.sform_code = 0;
                h.quatern_c = kInf;
              }),
              "quatern_c is inf; allowed: a finite number (qform_code > 0: the qform is used)");
}

// libnifti read scl_inter = inf as 0; scaling applies (scl_slope finite, not 0), so it is
// refused, as is a scaling past float's range; a non-finite scl_slope means unscaled.
TEST_F(NiftiHostile, ScalingMustBeFiniteAndStayWithinFloatsRange) {
  auto int16_image = [](nifti_1_header& h) {
    h.datatype = DT_INT16;
    h.bitpix = 16;
    h.dim[3] = 2;  // 5x4x2 int16 voxels: the 240 bytes the file holds
  };
  EXPECT_SAYS(refusal([](nifti_1_header& h) {
                h.scl_slope = 1;
                h.scl_inter = kInf;
              }),
              "scl_inter is inf; allowed: a finite number (scl_slope is 1: the voxels are scaled)");
  EXPECT_SAYS(refusal([&](nifti_1_header& h) {
                int16_image(h);
                h.scl_slope = 1e37f;
              }),
              "scl_slope, scl_inter is 1e+37, 0, which turn int16 values -32768 to 32767 into -3.2768e+41 to "
              "3.2767e+41; allowed: a scaling that keeps them within a float's range");
  write_bytes(path("unscaled.nii"), patched_nifti1(good_bytes(), [](nifti_1_header& h) {
                h.scl_slope = kNaN;
                h.scl_inter = kInf;
              }));
  EXPECT_EQ(read_nifti(path("unscaled.nii")).voxels[7], 7.0f);
}

// An sform whose axes point the same way ("RRS") maps several voxels to one place.
TEST_F(NiftiHostile, ASingularAffineIsRefusedNamingIt) {
  const std::string msg = refusal([](nifti_1_header& h) {
    for (int c = 0; c < 4; ++c) h.srow_y[c] = 0;
    h.srow_x[0] = 1;
    h.srow_x[1] = 1;  // the y axis along x too
    h.srow_z[2] = 1;
  });
  EXPECT_SAYS(msg, "sform: the axes' directions have determinant ");
  EXPECT_SAYS(msg, ": the affine is singular (two axes point the same way)");
}

TEST_F(NiftiHostile, SizesMustBePositive) {
  // libnifti made a size of 0 or less in dim[2..] 1.
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.dim[2] = 0; }),
              "dim[2] (the size along y) is 0; allowed: 1 to 1073741824 voxels");
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.dim[1] = -5; }), "dim[1] (the size along x) is -5");
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.dim[0] = 9; }),
              "dim[0] (the number of dimensions) is 9; allowed: 1 to 7");
  EXPECT_SAYS(refusal([](nifti_1_header& h) {
                h.dim[0] = 4;
                h.dim[4] = -1;
              }),
              "dim[4] is -1; allowed: 1 (a 3D volume)");
}

TEST_F(NiftiHostile, UnsupportedDatatypesAreNamed) {
  EXPECT_SAYS(refusal([](nifti_1_header& h) {
                h.datatype = DT_RGB24;
                h.bitpix = 24;
              }),
              "datatype is 128 (rgb24); allowed: a real scalar type: uint8, int8, uint16, int16, uint32, int32, "
              "uint64, int64, float32, float64");
  EXPECT_SAYS(refusal([](nifti_1_header& h) { h.datatype = 9999; }), "datatype is 9999 (not a NIfTI datatype)");
}

TEST_F(NiftiHostile, OnlySingleFileMagicIsRead) {
  EXPECT_SAYS(refusal([](nifti_1_header& h) { std::memcpy(h.magic, "ni1", 4); }),
              "magic is \"ni1\" (a header for a separate .img file); allowed: \"n+1\", a single-file NIfTI-1 image");
  EXPECT_SAYS(refusal([](nifti_1_header& h) { std::memcpy(h.magic, "\x1b[2J", 4); }), "magic is \"?[2J\"");
}

// 1100^3 is more than any machine's limit (at most kMaxVoxels, 2^30).
TEST_F(NiftiHostile, MoreVoxelsThanTheMachineTakesAreRefusedBeforeAllocating) {
  const std::string msg = refusal([](nifti_1_header& h) { h.dim[1] = h.dim[2] = h.dim[3] = 1100; });
  EXPECT_SAYS(msg, "dim[1..3] is 1100x1100x1100, 1331000000 voxels; allowed: at most ");
  EXPECT_SAYS(msg, " voxels (" + ReadLimits::of_this_machine().basis + ")");
}

// NIfTI-2 sizes are 64-bit: three of 2^30 multiply past int64, and must not wrap to a
// small count.
TEST_F(NiftiHostile, SizesWhoseProductOverflowsAreRefused) {
  Volume v(Grid{.dims = {5, 4, 3}});
  write_nifti(path("two.nii"), v, {.nifti2 = true});
  std::string bytes = read_bytes(path("two.nii"));
  nifti_2_header h = header_of<nifti_2_header>(bytes);
  ASSERT_EQ(h.sizeof_hdr, 540);
  h.dim[1] = h.dim[2] = h.dim[3] = int64_t{1} << 30;
  std::memcpy(bytes.data(), &h, sizeof h);
  write_bytes(path("overflow.nii"), bytes);
  EXPECT_SAYS(thrown_message<std::runtime_error>([&] { read_nifti(path("overflow.nii")); }),
              "dim[1..3] is 1073741824x1073741824x1073741824, 1.23794003928538e+27 voxels; allowed: at most ");
  h.dim[1] = int64_t{1} << 40;
  std::memcpy(bytes.data(), &h, sizeof h);
  write_bytes(path("overflow.nii"), bytes);
  EXPECT_SAYS(thrown_message<std::runtime_error>([&] { read_nifti(path("overflow.nii")); }),
              "dim[1] (the size along x) is 1099511627776; allowed: 1 to 1073741824 voxels");
}

// A gzipped header alone cannot promise more than deflate can expand the file to.
TEST_F(NiftiHostile, GzipClaimingMoreThanDeflateCanHoldIsRefused) {
  const std::string msg = refusal([](nifti_1_header& h) { h.dim[1] = h.dim[2] = h.dim[3] = 400; }, "d.nii.gz");
  EXPECT_SAYS(msg, "header promises 400x400x400 float32 voxels (256000000 bytes) from byte 352, more than ");
  EXPECT_SAYS(msg, " gzipped bytes can hold (deflate expands at most 1032-fold)");
}

// A 210 KB .nii.gz of 600^3 zero bytes, honestly compressed: 216 MB of voxels, 864 MB as
// floats, and minutes of inference. Over a limit of 512^3, refused from its header alone.
TEST_F(NiftiHostile, SmallGzipClaiming600CubedIsRefusedQuickly) {
  const std::string header = patched_nifti1(good_bytes().substr(0, 352), [](nifti_1_header& h) {
    h.dim[1] = h.dim[2] = h.dim[3] = 600;
    h.datatype = DT_UINT8;
    h.bitpix = 8;
  });
  const std::string p = path("bomb.nii.gz");
  ASSERT_NO_FATAL_FAILURE(testing::write_gzip_bomb(p, header, int64_t{600} * 600 * 600));
  ASSERT_LT(std::filesystem::file_size(p), 300u * 1024) << "a small file";

  const double rss_before = peak_rss_mib();
  const auto start = std::chrono::steady_clock::now();
  const std::string msg =
      thrown_message<std::runtime_error>([&] { read_nifti(p, ReadLimits::at_most(int64_t{512} * 512 * 512, "512^3")); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, kDeadline);
  EXPECT_SAYS(msg, p + ": dim[1..3] is 600x600x600, 216000000 voxels; allowed: at most 134217728 voxels (512^3)");
  EXPECT_LT(peak_rss_mib() - rss_before, 64) << "MiB allocated for a refused file";
}

// Under the cap and within what deflate can expand 64 KiB of noise to, the header's claim
// is 64 MB; the stream holds 64 KiB. Reading stops where the data does, and memory
// follows the data, not the claim.
TEST_F(NiftiHostile, GzipHoldingLessThanItClaimsStopsWhereTheDataDoes) {
  const std::string header = patched_nifti1(good_bytes().substr(0, 352), [](nifti_1_header& h) {
    h.dim[1] = h.dim[2] = h.dim[3] = 400;
    h.datatype = DT_UINT8;
    h.bitpix = 8;
  });
  std::string noise(1 << 16, '\0');
  engine::Generator gen(5);
  for (char& c : noise) c = static_cast<char>(gen.next_u64());
  const std::string p = path("short.nii.gz");
  write_gzipped(p, header + noise);

  const double rss_before = peak_rss_mib();
  const auto start = std::chrono::steady_clock::now();
  const std::string msg = thrown_message<std::runtime_error>([&] { read_nifti(p); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, kDeadline);
  EXPECT_SAYS(msg, p + ": truncated or corrupt: the header promises 64000000 voxels of 1 bytes, the data ends after "
                       "65536");
  EXPECT_LT(peak_rss_mib() - rss_before, 64) << "MiB allocated for 64 KiB of data";
}

TEST_F(NiftiHostile, CorruptGzipDataIsRefused) {
  write_gzipped(path("ok.nii.gz"), good_bytes());
  std::string bytes = read_bytes(path("ok.nii.gz"));
  for (size_t i = 40; i < bytes.size() - 8; ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
  write_bytes(path("corrupt.nii.gz"), bytes);
  const std::string msg = thrown_message<std::runtime_error>([&] { read_nifti(path("corrupt.nii.gz")); });
  EXPECT_SAYS(msg, path("corrupt.nii.gz") + ": ");
  EXPECT_SAYS(msg, "corrupt");
}

}  // namespace
}  // namespace quartet::medical3d

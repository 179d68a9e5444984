#include "medical3d/phantom.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>
#include <vector>

#include "tests/medical3d/test_dir.h"

namespace quartet::medical3d {
namespace {

using testing::thrown_message;

// Mean image value over the voxels of class c.
double class_mean(const Sample& s, uint8_t c) {
  double sum = 0;
  int64_t n = 0;
  for (size_t i = 0; i < s.image.voxels.size(); ++i)
    if (s.labels.voxels[i] == c) sum += s.image.voxels[i], ++n;
  return n ? sum / static_cast<double>(n) : 0;
}

class PhantomKinds : public ::testing::TestWithParam<PhantomKind> {};

TEST_P(PhantomKinds, SizeAndGridAreRight) {
  for (int64_t size : {32, 48}) {
    const Sample s = make_phantom(GetParam(), size, 1);
    EXPECT_EQ(s.image.grid.dims, (Dims3{size, size, size}));
    EXPECT_EQ(s.image.voxels.size(), static_cast<size_t>(size * size * size));
    EXPECT_TRUE(same_grid(s.labels.grid, s.image.grid));
    EXPECT_NEAR(s.image.grid.spacing[0] * static_cast<double>(size), kPhantomFieldOfViewMm, 1e-9);
    // Centred on the origin.
    const Vec3 far = s.image.grid.world(size - 1, size - 1, size - 1);
    for (int a = 0; a < 3; ++a) EXPECT_NEAR(far[a], -s.image.grid.origin[a], 1e-9);
  }
}

TEST_P(PhantomKinds, SameSeedSameVolume) {
  const Sample a = make_phantom(GetParam(), 32, 42), b = make_phantom(GetParam(), 32, 42);
  EXPECT_EQ(a.image.voxels, b.image.voxels);
  EXPECT_EQ(a.labels.voxels, b.labels.voxels);
}

TEST_P(PhantomKinds, OtherSeedsOtherAnatomy) {
  const Sample a = make_phantom(GetParam(), 32, 1), b = make_phantom(GetParam(), 32, 2);
  EXPECT_NE(a.image.voxels, b.image.voxels);
  EXPECT_NE(a.labels.voxels, b.labels.voxels);
}

TEST_P(PhantomKinds, EverySeedHasOrganAndLesionVoxels) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const auto counts = class_counts(make_phantom(GetParam(), 32, seed).labels);
    EXPECT_GT(counts[kOrganClass], 200) << "seed " << seed;
    EXPECT_GE(counts[kLesionClass], 8) << "seed " << seed;
    EXPECT_LT(counts[kLesionClass], counts[kOrganClass]) << "seed " << seed;
    EXPECT_EQ(counts[kBackgroundClass] + counts[kOrganClass] + counts[kLesionClass], 32 * 32 * 32);
  }
}

TEST_P(PhantomKinds, LesionsLieInsideTheOrgan) {
  const Sample s = make_phantom(GetParam(), 48, 5);
  // Every lesion voxel has an organ or lesion voxel on each side along x (none touches air).
  for (int64_t z = 0; z < 48; ++z)
    for (int64_t y = 0; y < 48; ++y)
      for (int64_t x = 1; x < 47; ++x)
        if (s.labels.at(x, y, z) == kLesionClass) {
          ASSERT_NE(s.labels.at(x - 1, y, z), kBackgroundClass);
          ASSERT_NE(s.labels.at(x + 1, y, z), kBackgroundClass);
        }
}

INSTANTIATE_TEST_SUITE_P(Kinds, PhantomKinds, ::testing::Values(PhantomKind::ct, PhantomKind::mri),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(Phantom, CaseSeedsDoNotDependOnCountAndDifferAcrossSeeds) {
  EXPECT_NE(phantom_case_seed(1, 0), phantom_case_seed(1, 1));
  EXPECT_NE(phantom_case_seed(1, 0), phantom_case_seed(2, 0));
  EXPECT_NE(phantom_case_seed(1, 1), phantom_case_seed(2, 0));
}

TEST(Phantom, SameSeedSameAnatomyInCtAndMri) {
  EXPECT_EQ(make_phantom(PhantomKind::ct, 32, 7).labels.voxels, make_phantom(PhantomKind::mri, 32, 7).labels.voxels);
}

TEST(Phantom, CtIsInHounsfieldUnits) {
  const Sample s = make_phantom(PhantomKind::ct, 48, 3);
  EXPECT_NEAR(class_mean(s, kOrganClass), 60, 3);
  EXPECT_NEAR(class_mean(s, kLesionClass), 7.5, 10);
  EXPECT_NEAR(s.image.at(0, 0, 0), -1000, 50);  // air in the corner
  const auto [lo, hi] = std::minmax_element(s.image.voxels.begin(), s.image.voxels.end());
  EXPECT_GE(*lo, -1024);
  EXPECT_GT(*hi, 600);  // bone
}

TEST(Phantom, MriIsPositiveWithDarkLesionsInABrightOrgan) {
  const Sample s = make_phantom(PhantomKind::mri, 48, 3);
  EXPECT_GT(*std::min_element(s.image.voxels.begin(), s.image.voxels.end()), 0.0f);  // Rician
  EXPECT_GT(class_mean(s, kOrganClass), class_mean(s, kLesionClass) + 150);
  EXPECT_LT(s.image.at(0, 0, 0), 100);  // air: noise only
}

TEST(Phantom, SizesOutsideTheRangeAreRefused) {
  EXPECT_THROW(make_phantom(PhantomKind::ct, 31, 0), std::invalid_argument);
  const std::string msg = thrown_message<std::invalid_argument>([] { make_phantom(PhantomKind::mri, 257, 0); });
  EXPECT_NE(msg.find("phantom size 257: expected 32 to 256"), std::string::npos) << msg;
}

TEST(Phantom, KindsParseByName) {
  EXPECT_EQ(parse_phantom_kind("ct"), PhantomKind::ct);
  EXPECT_EQ(parse_phantom_kind("mri"), PhantomKind::mri);
  const std::string msg = thrown_message<std::invalid_argument>([] { parse_phantom_kind("pet"); });
  EXPECT_NE(msg.find("expected ct or mri"), std::string::npos) << msg;
}

// FNV-1a over the image's and the labels' bytes.
uint64_t fingerprint(const Sample& s) {
  uint64_t h = 1469598103934665603ull;
  auto eat = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  };
  eat(s.image.voxels.data(), s.image.voxels.size() * sizeof(float));
  eat(s.labels.voxels.data(), s.labels.voxels.size());
  return h;
}

// Scanner 0 is the phantom as it was before scanners existed, voxel for voxel, so runs
// and results made without scanners stand. The fingerprints were taken from that code;
// they hold where floats are neither contracted (FMA) nor computed by another libm.
TEST(Phantom, ScannerZeroIsTheReferencePhantomBitForBit) {
#if defined(__x86_64__) && defined(__GLIBC__)
  EXPECT_EQ(fingerprint(make_phantom(PhantomKind::ct, 32, 7, 0)), 0xd570b7ee46234cbfull);
  EXPECT_EQ(fingerprint(make_phantom(PhantomKind::ct, 48, 7, 0)), 0x5530795df6347d88ull);
  EXPECT_EQ(fingerprint(make_phantom(PhantomKind::mri, 32, 7, 0)), 0xc5743887ece0ca80ull);
  EXPECT_EQ(fingerprint(make_phantom(PhantomKind::mri, 48, 7, 0)), 0xa51509ba4dde7beaull);
#else
  GTEST_SKIP() << "the fingerprints are of x86-64 glibc floats";
#endif
}

TEST_P(PhantomKinds, EveryScannerHasTheSameLabels) {
  const Sample reference = make_phantom(GetParam(), 32, 9);
  for (int scanner = 1; scanner < kPhantomScanners; ++scanner) {
    const Sample s = make_phantom(GetParam(), 32, 9, scanner);
    EXPECT_EQ(s.labels.voxels, reference.labels.voxels) << scanner;
    EXPECT_NE(s.image.voxels, reference.image.voxels) << scanner;
  }
}

// Mean and standard deviation of the image over the 3 x 3 columns of voxels in the
// corner x, y < 3 along every z: air on every phantom (the body ellipse stays inside).
std::pair<double, double> corner_air(const Sample& s) {
  double sum = 0, sum2 = 0;
  int64_t n = 0;
  for (int64_t z = 0; z < s.image.nz(); ++z)
    for (int64_t y = 0; y < 3; ++y)
      for (int64_t x = 0; x < 3; ++x) {
        const double v = s.image.at(x, y, z);
        sum += v, sum2 += v * v, ++n;
      }
  const double mean = sum / static_cast<double>(n);
  return {mean, std::sqrt(sum2 / static_cast<double>(n) - mean * mean)};
}

// Mean and standard deviation of the image over the liver's inside: organ voxels whose
// 26 neighbours are organ too (the liver is 60 HU before calibration, lesions aside).
std::pair<double, double> liver_inside(const Sample& s) {
  double sum = 0, sum2 = 0;
  int64_t n = 0;
  const int64_t size = s.image.nx();
  for (int64_t z = 1; z + 1 < size; ++z)
    for (int64_t y = 1; y + 1 < size; ++y)
      for (int64_t x = 1; x + 1 < size; ++x) {
        bool inside = true;
        for (int64_t dz = -1; dz <= 1; ++dz)
          for (int64_t dy = -1; dy <= 1; ++dy)
            for (int64_t dx = -1; dx <= 1; ++dx) inside = inside && s.labels.at(x + dx, y + dy, z + dz) == kOrganClass;
        if (!inside) continue;
        const double v = s.image.at(x, y, z);
        sum += v, sum2 += v * v, ++n;
      }
  const double mean = sum / static_cast<double>(n);
  return {mean, std::sqrt(sum2 / static_cast<double>(n) - mean * mean)};
}

// HU' = gain * HU + offset, then the scanner's noise: the liver's inside reads
// gain * 60 + offset with the profile's spread. Air, -1000 HU, clamps at -1024 where the
// calibration takes it below (the smooth-kernel scanner's -1060).
TEST(Phantom, CtScannersSetNoiseAndCalibration) {
  for (int scanner = 0; scanner < kPhantomScanners; ++scanner) {
    const ScannerProfile& p = scanner_profile(PhantomKind::ct, scanner);
    const Sample s = make_phantom(PhantomKind::ct, 48, 3, scanner);
    const auto [mean, sd] = liver_inside(s);
    EXPECT_NEAR(mean, p.gain * 60.0 + p.offset, 4.0) << p.name;
    EXPECT_NEAR(sd, p.noise, 0.15 * p.noise) << p.name;
    if (p.gain * -1000.0 + p.offset + 4 * p.noise < -1024) {
      EXPECT_EQ(corner_air(s).first, -1024.0) << p.name;
    }
  }
  EXPECT_EQ(scanner_profile(PhantomKind::ct, 0).noise, 10.0f);
  EXPECT_EQ(scanner_profile(PhantomKind::ct, 1).noise, 40.0f);
}

// Air and fat are 1000 HU apart; without blur no voxel lies between them, with the smooth
// kernel the body's edge spreads over intermediate values.
TEST(Phantom, CtSmoothKernelBlursTheBodyEdge) {
  auto between = [](const Sample& s) {
    return std::count_if(s.image.voxels.begin(), s.image.voxels.end(), [](float v) { return v > -800 && v < -300; });
  };
  EXPECT_EQ(between(make_phantom(PhantomKind::ct, 32, 3, 0)), 0);
  EXPECT_EQ(between(make_phantom(PhantomKind::ct, 32, 3, 1)), 0);
  EXPECT_GT(between(make_phantom(PhantomKind::ct, 32, 3, 2)), 500);
}

// MRI air is pure Rician noise of a zero signal: Rayleigh, mean sigma * sqrt(pi / 2).
TEST(Phantom, MriScannersSetNoiseAndIntensityScale) {
  const Sample reference = make_phantom(PhantomKind::mri, 32, 3);
  for (int scanner = 0; scanner < kPhantomScanners; ++scanner) {
    const ScannerProfile& p = scanner_profile(PhantomKind::mri, scanner);
    const Sample s = make_phantom(PhantomKind::mri, 32, 3, scanner);
    EXPECT_NEAR(corner_air(s).first, p.noise * std::sqrt(std::numbers::pi / 2), 0.1 * p.noise) << p.name;
    // The liver's mean scales with the profile (its bias field, at most a few % there, aside).
    EXPECT_NEAR(class_mean(s, kOrganClass) / class_mean(reference, kOrganClass), p.gain, 0.15 * p.gain) << p.name;
  }
}

// The surface coil's bias field is four times the reference's exponent: fat, all around
// the body, varies far more than the noise alone would make it.
TEST(Phantom, MriSurfaceCoilHasAStrongerBiasField) {
  auto fat_spread = [](const Sample& s) {
    std::vector<double> fat;
    for (size_t i = 0; i < s.image.voxels.size(); ++i)
      if (s.labels.voxels[i] == kBackgroundClass && s.image.voxels[i] > 600) fat.push_back(s.image.voxels[i]);
    std::sort(fat.begin(), fat.end());
    return fat[fat.size() * 9 / 10] / fat[fat.size() / 10];
  };
  for (uint64_t seed : {1, 2, 3}) {
    const double reference = fat_spread(make_phantom(PhantomKind::mri, 32, seed, 0));
    const double coil = fat_spread(make_phantom(PhantomKind::mri, 32, seed, 2));
    EXPECT_GT(coil - 1, 2 * (reference - 1)) << "seed " << seed;
  }
}

TEST(Phantom, ScannersOutsideTheProfilesAreRefused) {
  const std::string past =
      thrown_message<std::invalid_argument>([] { make_phantom(PhantomKind::ct, 32, 1, kPhantomScanners); });
  EXPECT_NE(past.find("expected 0 to 3"), std::string::npos) << past;
  const std::string negative = thrown_message<std::invalid_argument>([] { scanner_profile(PhantomKind::mri, -1); });
  EXPECT_NE(negative.find("phantom scanner -1"), std::string::npos) << negative;
}

}  // namespace
}  // namespace quartet::medical3d

#include "medical3d/phantom.h"

#include <gtest/gtest.h>

#include <algorithm>

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

}  // namespace
}  // namespace quartet::medical3d

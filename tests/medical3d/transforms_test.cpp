#include "medical3d/transforms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "tests/medical3d/test_dir.h"

namespace quartet::medical3d {
namespace {

using testing::thrown_message;

Grid grid(Dims3 dims, Vec3 spacing = {1, 1, 1}) {
  Grid g;
  g.dims = dims;
  g.spacing = spacing;
  g.origin = {10, -20, 30};
  return g;
}

// A volume whose voxels hold f(world position).
template <class F>
Volume field(const Grid& g, F f) {
  Volume v(g);
  for (int64_t z = 0; z < g.nz(); ++z)
    for (int64_t y = 0; y < g.ny(); ++y)
      for (int64_t x = 0; x < g.nx(); ++x) v.at(x, y, z) = f(g.world(x, y, z));
  return v;
}

float mean(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return static_cast<float>(s / static_cast<double>(v.size()));
}

TEST(Window, MapsTheWindowOntoZeroToOneAndClamps) {
  Volume ct(grid({5, 1, 1}));
  ct.voxels = {-1000, -160, 40, 240, 3000};
  const Volume w = window(ct, 40, 400);
  EXPECT_EQ(w.voxels, (std::vector<float>{0, 0, 0.5f, 1, 1}));
  EXPECT_TRUE(same_grid(w.grid, ct.grid));
}

TEST(Window, RefusesAWidthThatIsNotPositive) {
  Volume ct(grid({2, 1, 1}));
  EXPECT_THROW(window(ct, 40, 0), std::invalid_argument);
  EXPECT_THROW(window(ct, 40, -10), std::invalid_argument);
}

TEST(ZScore, ForegroundGetsMeanZeroAndUnitStdAndBackgroundStays) {
  Volume mri(grid({10, 10, 10}));
  engine::Generator gen(1);
  for (size_t i = 0; i < mri.voxels.size(); ++i) mri.voxels[i] = i % 4 == 0 ? 0.0f : gen.uniform(100, 900);
  const Volume z = zscore(mri);
  std::vector<float> fg;
  for (size_t i = 0; i < z.voxels.size(); ++i) {
    if (i % 4 == 0) {
      ASSERT_EQ(z.voxels[i], 0.0f);
    } else {
      fg.push_back(z.voxels[i]);
    }
  }
  const float m = mean(fg);
  double var = 0;
  for (float x : fg) var += (x - m) * (x - m);
  EXPECT_NEAR(m, 0.0f, 1e-4);
  EXPECT_NEAR(std::sqrt(var / static_cast<double>(fg.size())), 1.0, 1e-4);
}

TEST(ZScore, AllVoxelsGetMeanZeroAndUnitStd) {
  Volume mri(grid({8, 8, 8}));
  engine::Generator gen(2);
  for (float& x : mri.voxels) x = gen.normal(50, 7);
  const Volume z = zscore(mri, ZScoreOver::all);
  const float m = mean(z.voxels);
  double var = 0;
  for (float x : z.voxels) var += (x - m) * (x - m);
  EXPECT_NEAR(m, 0.0f, 1e-4);
  EXPECT_NEAR(std::sqrt(var / static_cast<double>(z.voxels.size())), 1.0, 1e-4);
}

TEST(ZScore, RefusesAnEmptyForeground) {
  Volume mri(grid({4, 4, 4}), 0.0f);
  const std::string msg = thrown_message<std::invalid_argument>([&] { zscore(mri); });
  EXPECT_NE(msg.find("no voxel is > 0"), std::string::npos) << msg;
}

TEST(Resample, CoarserSpacingShrinksTheGridAndKeepsTheFieldOfView) {
  const Grid g = resampled_grid(grid({20, 10, 8}, {1, 1, 2}), {2, 2, 2});
  EXPECT_EQ(g.dims, (Dims3{10, 5, 8}));
  EXPECT_EQ(g.spacing, (Vec3{2, 2, 2}));
  // The outer face of voxel 0 stays put: its centre moves by half the new spacing change.
  EXPECT_EQ(g.origin, (Vec3{10.5, -19.5, 30}));
}

TEST(Resample, FinerSpacingGrowsTheGrid) {
  const Volume v(grid({16, 16, 4}, {1, 1, 5}));
  EXPECT_EQ(resample(v, {0.5, 2, 1}).grid.dims, (Dims3{32, 8, 20}));
}

TEST(Resample, TrilinearIsExactOnALinearField) {
  auto f = [](const Vec3& p) { return static_cast<float>(2 * p[0] - 3 * p[1] + 0.5 * p[2]); };
  const Volume v = field(grid({12, 10, 9}, {1, 1.5, 2}), f);
  const Volume r = resample(v, {0.7, 1.1, 1.3});
  // Away from the edges, where resampling clamps rather than extrapolates.
  for (int64_t z = 2; z < r.nz() - 2; ++z)
    for (int64_t y = 2; y < r.ny() - 2; ++y)
      for (int64_t x = 2; x < r.nx() - 2; ++x)
        ASSERT_NEAR(r.at(x, y, z), f(r.grid.world(x, y, z)), 1e-3) << x << " " << y << " " << z;
}

TEST(Resample, LabelsUseNearestNeighbourAndKeepTheirClasses) {
  LabelVolume labels(grid({9, 9, 9}));
  for (size_t i = 0; i < labels.voxels.size(); ++i) labels.voxels[i] = static_cast<uint8_t>(i % 7 == 0 ? 2 : i % 3);
  const LabelVolume r = resample(labels, {0.6, 1.7, 2.2});
  std::set<uint8_t> classes(r.voxels.begin(), r.voxels.end());
  EXPECT_EQ(classes, (std::set<uint8_t>{0, 1, 2}));
  EXPECT_EQ(r.grid.dims, resample(Volume(labels.grid), {0.6, 1.7, 2.2}).grid.dims);
}

TEST(Resample, SameSpacingIsTheIdentity) {
  engine::Generator gen(4);
  Volume v(grid({7, 6, 5}, {0.8, 0.8, 3}));
  for (float& x : v.voxels) x = gen.uniform(-1, 1);
  const Volume r = resample(v, v.grid.spacing);
  EXPECT_TRUE(same_grid(r.grid, v.grid));
  for (size_t i = 0; i < v.voxels.size(); ++i) ASSERT_FLOAT_EQ(r.voxels[i], v.voxels[i]);
}

TEST(Resample, RefusesSpacingThatIsNotPositive) {
  const Volume v(grid({4, 4, 4}));
  EXPECT_THROW(resample(v, {1, 0, 1}), std::invalid_argument);
  EXPECT_THROW(resample(v, {1, 1, NAN}), std::invalid_argument);
}

TEST(Crop, KeepsEachVoxelsWorldPositionAndPadsOutside) {
  const Grid g = grid({6, 5, 4}, {0.5, 1, 2});
  const Volume v = field(g, [](const Vec3& p) { return static_cast<float>(p[0] + 10 * p[1] + 100 * p[2]); });
  const Volume c = crop(v, Box{{-1, 2, 1}, {3, 4, 2}}, -7.0f);
  EXPECT_EQ(c.grid.dims, (Dims3{3, 4, 2}));
  const Vec3 o = g.world(-1, 2, 1);
  EXPECT_EQ(c.grid.origin, o);
  for (int64_t z = 0; z < 2; ++z)
    for (int64_t y = 0; y < 4; ++y)
      for (int64_t x = 0; x < 3; ++x) {
        const bool inside = x >= 1 && y + 2 < 5;
        if (inside)
          EXPECT_EQ(c.at(x, y, z), v.at(x - 1, y + 2, z + 1));
        else
          EXPECT_EQ(c.at(x, y, z), -7.0f);
      }
}

TEST(RandomCrop, SameSeedSameBoxOtherSeedsOtherBoxes) {
  const Grid g = grid({40, 30, 20});
  std::set<std::array<int64_t, 3>> starts;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    engine::Generator a(seed), b(seed);
    const Box x = random_crop_box(g, {16, 16, 8}, a), y = random_crop_box(g, {16, 16, 8}, b);
    EXPECT_EQ(x.start, y.start);
    for (int i = 0; i < 3; ++i) {
      EXPECT_GE(x.start[i], 0);
      EXPECT_LE(x.start[i] + x.size[i], g.dims[i]);
    }
    starts.insert(x.start);
  }
  EXPECT_GT(starts.size(), 4u);
}

TEST(RandomCrop, ForegroundProbabilityOneAlwaysCentresOnALabel) {
  const Grid g = grid({32, 32, 32});
  Volume image(g);
  LabelVolume labels(g);
  labels.at(28, 3, 30) = 1;  // one labelled voxel, near a corner
  engine::Generator gen(9);
  for (int i = 0; i < 20; ++i) {
    const Sample s = random_crop(image, labels, {8, 8, 8}, 1.0f, gen);
    EXPECT_EQ(class_counts(s.labels)[1], 1) << i;
  }
}

TEST(RandomCrop, ForegroundProbabilityZeroCentresOnBackground) {
  const Grid g = grid({16, 16, 16});
  LabelVolume labels(g, 1);
  for (int64_t x = 0; x < 4; ++x) labels.at(x, 0, 0) = 0;  // the only background
  engine::Generator gen(3);
  const Box b = random_crop_box(g, {2, 2, 2}, gen, &labels, 0.0f);
  EXPECT_EQ(b.start[1], 0);
  EXPECT_EQ(b.start[2], 0);
  EXPECT_LE(b.start[0], 3);
}

TEST(RandomCrop, LargerThanTheVolumeCentresAndPads) {
  const Grid g = grid({10, 10, 10});
  Volume image(g, 5.0f);
  LabelVolume labels(g, 1);
  engine::Generator gen(1);
  const Sample s = random_crop(image, labels, {14, 10, 12}, 0.5f, gen, -1.0f);
  EXPECT_EQ(s.image.grid.dims, (Dims3{14, 10, 12}));
  EXPECT_EQ(s.image.at(0, 5, 5), -1.0f);
  EXPECT_EQ(s.image.at(2, 5, 1), 5.0f);
  EXPECT_EQ(s.labels.at(13, 5, 5), 0);
  EXPECT_EQ(class_counts(s.labels)[1], 1000);
}

TEST(Flip, TwiceIsTheIdentityAndWorldPositionsHold) {
  const Grid g = grid({5, 4, 3}, {0.5, 1, 2});
  const Volume v = field(g, [](const Vec3& p) { return static_cast<float>(p[0] + 10 * p[1] + 100 * p[2]); });
  for (int axis = 0; axis < 3; ++axis) {
    Volume f = v;
    flip_(f, axis);
    EXPECT_NE(f.voxels, v.voxels);
    for (int64_t z = 0; z < g.nz(); ++z)
      for (int64_t y = 0; y < g.ny(); ++y)
        for (int64_t x = 0; x < g.nx(); ++x) {
          const Vec3 p = f.grid.world(x, y, z);
          ASSERT_NEAR(f.at(x, y, z), p[0] + 10 * p[1] + 100 * p[2], 1e-3);
        }
    flip_(f, axis);
    EXPECT_EQ(f.voxels, v.voxels);
    EXPECT_TRUE(same_grid(f.grid, v.grid));
  }
}

TEST(Flip, ReversesTheChosenAxis) {
  Volume v(grid({3, 2, 2}));
  for (size_t i = 0; i < v.voxels.size(); ++i) v.voxels[i] = static_cast<float>(i);
  flip_(v, 0);
  EXPECT_EQ(v.at(0, 1, 1), 11.0f);
  EXPECT_EQ(v.at(2, 1, 1), 9.0f);
  EXPECT_THROW(flip_(v, 3), std::invalid_argument);
}

TEST(RandomFlip, IsSeededAndFlipsImageAndLabelsTogether) {
  const Grid g = grid({6, 5, 4});
  Volume image(g);
  LabelVolume labels(g);
  for (size_t i = 0; i < image.voxels.size(); ++i) {
    image.voxels[i] = static_cast<float>(i);
    labels.voxels[i] = static_cast<uint8_t>(i);
  }
  std::set<std::array<bool, 3>> seen;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    Volume i1 = image, i2 = image;
    LabelVolume l1 = labels, l2 = labels;
    engine::Generator a(seed), b(seed);
    const auto f1 = random_flip_(i1, l1, 0.5f, a);
    const auto f2 = random_flip_(i2, l2, 0.5f, b);
    EXPECT_EQ(f1, f2);
    EXPECT_EQ(i1.voxels, i2.voxels);
    for (size_t i = 0; i < i1.voxels.size(); ++i) ASSERT_EQ(static_cast<uint8_t>(i1.voxels[i]), l1.voxels[i]);
    seen.insert(f1);
  }
  EXPECT_GT(seen.size(), 3u);
}

TEST(RandomFlip, ProbabilityZeroNeverFlipsAndOneAlwaysDoes) {
  Volume image(grid({3, 3, 3}));
  engine::Generator gen(0);
  EXPECT_EQ(random_flip_(image, 0.0f, gen), (std::array<bool, 3>{false, false, false}));
  EXPECT_EQ(random_flip_(image, 1.0f, gen), (std::array<bool, 3>{true, true, true}));
  EXPECT_THROW(random_flip_(image, 1.5f, gen), std::invalid_argument);
}

}  // namespace
}  // namespace quartet::medical3d

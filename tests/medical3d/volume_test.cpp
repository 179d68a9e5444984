#include "medical3d/volume.h"

#include <gtest/gtest.h>

#include "tests/medical3d/test_dir.h"

namespace quartet::medical3d {
namespace {

using testing::thrown_message;

TEST(Volume, StoresXFastestAsDepthHeightWidth) {
  Grid g;
  g.dims = {4, 3, 2};
  Volume v(g);
  EXPECT_EQ(g.shape_dhw(), (Dims3{2, 3, 4}));
  EXPECT_EQ(v.index(1, 2, 1), (1 * 3 + 2) * 4 + 1);
  v.at(3, 2, 1) = 5;
  EXPECT_EQ(v.voxels.back(), 5);
}

TEST(Volume, WorldAppliesSpacingDirectionAndOrigin) {
  Grid g;
  g.spacing = {2, 3, 4};
  g.origin = {1, 1, 1};
  g.direction = {0, -1, 0, 1, 0, 0, 0, 0, 1};  // index x runs along +y, index y along -x
  EXPECT_EQ(g.world(1, 1, 1), (Vec3{1 - 3, 1 + 2, 1 + 4}));
}

TEST(Volume, BadGridsAreRefused) {
  Grid g;
  g.dims = {0, 4, 4};
  EXPECT_NE(thrown_message<std::invalid_argument>([&] { check_grid(g); }).find("size along x is 0"), std::string::npos);
  g.dims = {4, 4, 4};
  g.spacing = {1, -1, 1};
  EXPECT_THROW(check_grid(g), std::invalid_argument);
  g.spacing = {1, 1, 1};
  g.direction = {2, 0, 0, 0, 1, 0, 0, 0, 1};
  EXPECT_THROW(check_grid(g), std::invalid_argument);
  g.direction = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  g.dims = {2048, 2048, 2048};  // more than kMaxVoxels: refused before any allocation
  EXPECT_THROW(Volume{g}, std::invalid_argument);
}

TEST(Volume, LabelsFromWholeNumbers) {
  Grid g;
  g.dims = {3, 1, 1};
  Volume v(g);
  v.voxels = {0, 2, 255};
  EXPECT_EQ(to_labels(v).voxels, (std::vector<uint8_t>{0, 2, 255}));
  v.voxels = {0, 1.5f, 2};
  EXPECT_NE(thrown_message<std::invalid_argument>([&] { to_labels(v); }).find("voxel (1, 0, 0) holds 1.5"),
            std::string::npos);
  v.voxels = {0, 256, 2};
  EXPECT_THROW(to_labels(v), std::invalid_argument);
}

}  // namespace
}  // namespace quartet::medical3d

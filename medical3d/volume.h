#pragma once

// A 3D image on a grid in patient space.
//
// Coordinates are LPS+ millimetres, as DICOM and ITK use them: +x towards the patient's
// left, +y towards posterior, +z towards superior. (NIfTI files are RAS+; the NIfTI reader
// and writer convert.) Index axes are x = i (columns), y = j (rows), z = k (slices), and
// the centre of voxel (i, j, k) sits at
//   origin + direction * (spacing[0] * i, spacing[1] * j, spacing[2] * k).
//
// Voxels are stored x fastest: voxels[(z * ny + y) * nx + x]. Read as an engine tensor,
// one volume is (D, H, W) = (nz, ny, nx), ready to become (C, D, H, W) with C = 1.

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace quartet::medical3d {

using Vec3 = std::array<double, 3>;
using Mat3 = std::array<double, 9>;    // row-major: m[3 * row + col]
using Dims3 = std::array<int64_t, 3>;  // voxels along x, y, z

// More voxels than this (1024^3, 4 GiB of floats) are refused before anything is allocated.
inline constexpr int64_t kMaxVoxels = int64_t{1} << 30;

// Where the voxels of a volume sit in patient space.
struct Grid {
  Dims3 dims{1, 1, 1};
  Vec3 spacing{1, 1, 1};  // mm between voxel centres along x, y, z
  Vec3 origin{0, 0, 0};   // LPS mm of the centre of voxel (0, 0, 0)
  // Direction cosines: column c is the LPS unit vector along index axis c.
  Mat3 direction{1, 0, 0, 0, 1, 0, 0, 0, 1};

  int64_t nx() const { return dims[0]; }
  int64_t ny() const { return dims[1]; }
  int64_t nz() const { return dims[2]; }
  int64_t voxel_count() const { return dims[0] * dims[1] * dims[2]; }
  // (D, H, W): the shape of one channel as an engine tensor.
  Dims3 shape_dhw() const { return {dims[2], dims[1], dims[0]}; }
  // LPS mm of the continuous index (i, j, k).
  Vec3 world(double i, double j, double k) const;
};

// Unit axes whose determinant is smaller (in size) than this are taken as parallel: the
// affine is singular. An oblique but sound grid has |det| near 1.
inline constexpr double kMinDirectionDeterminant = 0.01;

// Throws std::invalid_argument, prefixed with `what`, unless every size is in
// [1, kMaxVoxels] with a product of at most kMaxVoxels, the spacing is finite and > 0,
// and the direction is finite with unit-length columns (tolerance 1e-3) whose
// determinant is at least kMinDirectionDeterminant in size.
void check_grid(const Grid& grid, const std::string& what = "grid");

// Same dims, and spacing, origin and direction within `tolerance` (mm, or cosines).
bool same_grid(const Grid& a, const Grid& b, double tolerance = 1e-4);

// A grid and its voxels: float images (HU, MR intensities, normalised values) and uint8
// label masks share one shape.
template <class T>
struct VolumeOf {
  Grid grid;
  std::vector<T> voxels;  // grid.voxel_count() values, x fastest

  VolumeOf() = default;
  // requires check_grid(g) to pass; every voxel is `fill`.
  explicit VolumeOf(const Grid& g, T fill = T{}) : grid(g) {
    check_grid(g, "volume");
    voxels.assign(static_cast<size_t>(g.voxel_count()), fill);
  }

  int64_t nx() const { return grid.dims[0]; }
  int64_t ny() const { return grid.dims[1]; }
  int64_t nz() const { return grid.dims[2]; }
  int64_t index(int64_t x, int64_t y, int64_t z) const { return (z * grid.dims[1] + y) * grid.dims[0] + x; }
  T& at(int64_t x, int64_t y, int64_t z) { return voxels[static_cast<size_t>(index(x, y, z))]; }
  const T& at(int64_t x, int64_t y, int64_t z) const { return voxels[static_cast<size_t>(index(x, y, z))]; }
};

using Volume = VolumeOf<float>;         // an image
using LabelVolume = VolumeOf<uint8_t>;  // a segmentation mask: one class index per voxel

// An image and its segmentation, on one grid.
struct Sample {
  Volume image;
  LabelVolume labels;
};

// The mask of an image whose voxels hold class indices (a label file read as floats).
// Throws std::invalid_argument, prefixed with `what`, naming the first voxel that is not
// an integer in [0, 255].
LabelVolume to_labels(const Volume& v, const std::string& what = "label volume");

// How many voxels hold each class: counts[c] for c in [0, 255].
std::array<int64_t, 256> class_counts(const LabelVolume& v);

// The voxels of an image that are NaN or infinite (a model given them answers with
// garbage: they are refused where images come in, or replaced).
int64_t non_finite_voxels(const Volume& v);
// Sets every voxel that is NaN or infinite to `value`; returns how many there were.
int64_t replace_non_finite(Volume& v, float value);

}  // namespace quartet::medical3d

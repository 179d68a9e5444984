#pragma once

// Slices of a volume as images: axial, coronal or sagittal, windowed (window/level) to
// grey, with a segmentation mask blended over in one colour per class. Display follows
// the radiological convention for an LPS volume with direction identity: the patient's
// right on the viewer's left, anterior up in axial slices, superior up in the others.

#include <QColor>
#include <QImage>
#include <array>
#include <cstdint>

#include "medical3d/volume.h"

namespace quartet::gui {

enum class Plane { axial, coronal, sagittal };

struct SliceStyle {
  double window = 400.0;  // intensity range shown from black to white
  double level = 40.0;    // the intensity shown mid-grey
  double mask_opacity = 0.45;
};

// Slices along `plane`: nz (axial), ny (coronal) or nx (sagittal).
int64_t slice_count(const medical3d::Grid& grid, Plane plane);

// The `index`-th slice (clamped to the volume), one pixel per voxel, with the mask's
// non-zero classes blended over it. `mask` may be null; it must share the image's dims
// (throws std::invalid_argument otherwise).
QImage slice_image(const medical3d::Volume& image, Plane plane, int64_t index, const SliceStyle& style,
                   const medical3d::LabelVolume* mask = nullptr);

// The physical aspect of a slice's pixels (height over width, from the spacing), so a
// view can scale anisotropic voxels to their true shape.
double pixel_aspect(const medical3d::Grid& grid, Plane plane);

// A window and level to start from: CT's soft-tissue window (400/40) when the volume
// holds air at about −1000 HU, else its 1st to 99th percentile.
SliceStyle default_style(const medical3d::Volume& image);

// The colour of mask class c (1: red, 2: yellow, 3: cyan, …).
QColor class_color(int c);

// The voxel (x, y, z) under pixel (u, v) of slice `s` of `plane` as slice_image draws it.
std::array<int64_t, 3> slice_voxel(const medical3d::Grid& grid, Plane plane, int64_t s, int64_t u, int64_t v);

// Where voxel (x, y, z) lies in `plane`: the slice holding it, and its pixel (u, v) there;
// the inverse of slice_voxel.
struct SlicePoint {
  int64_t slice, u, v;
};
SlicePoint voxel_point(const medical3d::Grid& grid, Plane plane, const std::array<int64_t, 3>& voxel);

// The patient's directions at a slice's left, right, top and bottom edges as slice_image
// draws an LPS volume (R/L, A/P, S/I): axial R L A P, coronal R L S I, sagittal A P S I.
struct EdgeLetters {
  const char* left;
  const char* right;
  const char* top;
  const char* bottom;
};
EdgeLetters edge_letters(Plane plane);

}  // namespace quartet::gui

#pragma once

// Intensity and spatial transforms for training on volumes. Random ones draw from an
// engine::Generator, so a seed reproduces every crop and flip.

#include <array>

#include "engine/random.h"
#include "medical3d/volume.h"

namespace quartet::medical3d {

// CT windowing: HU in [center - width / 2, center + width / 2] map linearly onto [0, 1];
// values below and above clamp to 0 and 1. Abdomen is often 40 / 400, bone 400 / 1800.
// throws std::invalid_argument unless width > 0 and both are finite.
Volume window(const Volume& ct, float center, float width);

enum class ZScoreOver {
  foreground,  // statistics over voxels > 0, and only those change (MONAI's nonzero=True)
  all,         // statistics over, and applied to, every voxel
};

// MRI z-score normalisation: (v - mean) / std. With ZScoreOver::foreground the
// background (voxels <= 0: air outside a masked or skull-stripped image) keeps its
// values; note that Rician noise leaves an unmasked background > 0, so it counts as
// foreground there. A std of 0 divides by 1.
// throws std::invalid_argument when no voxel is > 0 under ZScoreOver::foreground.
Volume zscore(const Volume& mri, ZScoreOver over = ZScoreOver::foreground);

// The grid covering the same field of view at `spacing` (mm along x, y, z):
// dims = max(1, round(dims * old spacing / new spacing)), the outer face of voxel 0
// where it was (the origin moves by half the change in spacing), direction unchanged.
// throws std::invalid_argument when a spacing is not finite and > 0, or when the new grid
// fails check_grid (more than kMaxVoxels).
Grid resampled_grid(const Grid& grid, const Vec3& spacing);
// Trilinear interpolation onto resampled_grid; edges are clamped, not extrapolated.
Volume resample(const Volume& image, const Vec3& spacing);
// Nearest neighbour onto resampled_grid (class indices must not blend).
LabelVolume resample(const LabelVolume& labels, const Vec3& spacing);

// A box of voxels: x, y, z indices of its first voxel and its size. It may overhang the
// volume (negative start, or past the end): crop fills what lies outside.
struct Box {
  Dims3 start{0, 0, 0};
  Dims3 size{1, 1, 1};
};

// The voxels of `box` as a new volume whose grid keeps each voxel's world position
// (origin = the world position of box.start); voxels outside the source are `fill`.
// throws std::invalid_argument unless every box size is >= 1 and the box has at most
// kMaxVoxels voxels.
Volume crop(const Volume& image, const Box& box, float fill = 0);
LabelVolume crop(const LabelVolume& labels, const Box& box, uint8_t fill = 0);

// A random box of `size` in `grid`. Without labels, uniform over the positions where it
// fits. With labels (on the same grid) it is centred, as in MONAI's
// RandCropByPosNegLabel, with probability `foreground_probability` on a voxel drawn
// uniformly from those with a label > 0, else on one with label 0 (on the other kind
// when there is none of the first), then shifted to lie inside the volume. Along an axis
// where `size` exceeds the volume, the box is centred on it and overhangs both ends.
// Draws: without labels, one gen.below per axis that fits (x, y, z); with labels, one
// gen.uniform (foreground or not), then one gen.below for the centre.
// throws std::invalid_argument when a size is < 1, labels are on another grid, or the
// probability is outside [0, 1].
Box random_crop_box(const Grid& grid, const Dims3& size, engine::Generator& gen, const LabelVolume* labels = nullptr,
                    float foreground_probability = 0);

// Crops `image` and `labels` with one random_crop_box; what overhangs is `image_fill` in
// the image and 0 (background) in the labels.
Sample random_crop(const Volume& image, const LabelVolume& labels, const Dims3& size, float foreground_probability,
                   engine::Generator& gen, float image_fill = 0);

// Reverses the voxel order along `axis` (0 = x, 1 = y, 2 = z), in place. The grid is
// updated to match (origin to the far end, that direction column negated), so every
// voxel keeps its world position; a training loop that reads only voxels sees a mirror.
// throws std::invalid_argument when axis is not 0, 1 or 2.
void flip_(Volume& v, int axis);
void flip_(LabelVolume& v, int axis);

// Flips along each axis with probability `probability`: one uniform per axis, x then y
// then z; the image and its labels flip together. Returns which axes flipped.
// throws std::invalid_argument when the probability is outside [0, 1] or the grids differ.
std::array<bool, 3> random_flip_(Volume& image, LabelVolume& labels, float probability, engine::Generator& gen);
std::array<bool, 3> random_flip_(Volume& image, float probability, engine::Generator& gen);

}  // namespace quartet::medical3d

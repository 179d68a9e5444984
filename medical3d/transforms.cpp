#include "medical3d/transforms.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace quartet::medical3d {
namespace {

void check_probability(float p, const char* fn) {
  if (!(p >= 0.0f && p <= 1.0f))
    throw std::invalid_argument(std::string(fn) + ": probability " + std::to_string(p) + " is outside [0, 1]");
}

void check_axis(int axis) {
  if (axis < 0 || axis > 2) throw std::invalid_argument("flip_: axis " + std::to_string(axis) + " is not 0, 1 or 2");
}

// For each index of the new axis: the two source indices around it and the weight of the second.
struct AxisTaps {
  std::vector<int64_t> lo, hi;
  std::vector<float> w;
};

AxisTaps axis_taps(int64_t n_old, double old_spacing, int64_t n_new, double new_spacing) {
  AxisTaps t;
  t.lo.resize(n_new);
  t.hi.resize(n_new);
  t.w.resize(n_new);
  const double scale = new_spacing / old_spacing;
  for (int64_t i = 0; i < n_new; ++i) {
    // Voxel centres: i + 0.5 in new units is the same distance from the outer face.
    const double x = std::clamp((static_cast<double>(i) + 0.5) * scale - 0.5, 0.0, static_cast<double>(n_old - 1));
    const int64_t lo = static_cast<int64_t>(std::floor(x));
    t.lo[i] = lo;
    t.hi[i] = std::min(lo + 1, n_old - 1);
    t.w[i] = static_cast<float>(x - static_cast<double>(lo));
  }
  return t;
}

template <class T>
VolumeOf<T> crop_any(const VolumeOf<T>& v, const Box& box, T fill) {
  Grid g = v.grid;
  g.dims = box.size;
  check_grid(g, "crop: box");  // sizes >= 1 and a bounded voxel count, before allocating
  g.origin = v.grid.world(static_cast<double>(box.start[0]), static_cast<double>(box.start[1]),
                          static_cast<double>(box.start[2]));
  VolumeOf<T> out(g, fill);
  // The x range of each row that lies inside the source.
  const int64_t x0 = std::max<int64_t>(0, -box.start[0]);
  const int64_t x1 = std::min<int64_t>(box.size[0], v.nx() - box.start[0]);
  if (x1 <= x0) return out;
  for (int64_t z = 0; z < box.size[2]; ++z) {
    const int64_t sz = box.start[2] + z;
    if (sz < 0 || sz >= v.nz()) continue;
    for (int64_t y = 0; y < box.size[1]; ++y) {
      const int64_t sy = box.start[1] + y;
      if (sy < 0 || sy >= v.ny()) continue;
      const T* src = &v.at(box.start[0] + x0, sy, sz);
      std::copy(src, src + (x1 - x0), &out.at(x0, y, z));
    }
  }
  return out;
}

template <class T>
void flip_any(VolumeOf<T>& v, int axis) {
  check_axis(axis);
  const int64_t nx = v.nx(), ny = v.ny(), nz = v.nz();
  for (int64_t z = 0; z < nz; ++z)
    for (int64_t y = 0; y < ny; ++y) {
      if (axis == 0) {
        std::reverse(&v.at(0, y, z), &v.at(0, y, z) + nx);
      } else if (axis == 1 && y < ny / 2) {
        std::swap_ranges(&v.at(0, y, z), &v.at(0, y, z) + nx, &v.at(0, ny - 1 - y, z));
      } else if (axis == 2 && z < nz / 2) {
        std::swap_ranges(&v.at(0, y, z), &v.at(0, y, z) + nx, &v.at(0, y, nz - 1 - z));
      }
    }
  Grid& g = v.grid;
  Vec3 far{0, 0, 0};
  far[axis] = static_cast<double>(g.dims[axis] - 1);
  g.origin = g.world(far[0], far[1], far[2]);
  for (int r = 0; r < 3; ++r) g.direction[3 * r + axis] = -g.direction[3 * r + axis];
}

}  // namespace

Volume window(const Volume& ct, float center, float width) {
  if (!std::isfinite(center) || !std::isfinite(width) || !(width > 0))
    throw std::invalid_argument("window: width " + std::to_string(width) + " and center " + std::to_string(center) +
                                " must be finite, with width > 0");
  Volume out = ct;
  const float lo = center - width / 2;
  for (float& v : out.voxels) v = std::clamp((v - lo) / width, 0.0f, 1.0f);
  return out;
}

Volume zscore(const Volume& mri, ZScoreOver over) {
  const bool fg = over == ZScoreOver::foreground;
  double sum = 0;
  int64_t n = 0;
  for (float v : mri.voxels)
    if (!fg || v > 0) sum += v, ++n;
  if (n == 0)
    throw std::invalid_argument(fg ? "zscore: no voxel is > 0, so there is no foreground to normalise over"
                                   : "zscore: the volume has no voxels");
  const double mean = sum / static_cast<double>(n);
  double sq = 0;
  for (float v : mri.voxels)
    if (!fg || v > 0) sq += (v - mean) * (v - mean);
  const double sd = std::sqrt(sq / static_cast<double>(n));
  const double inv = sd > 0 ? 1.0 / sd : 1.0;
  Volume out = mri;
  for (float& v : out.voxels)
    if (!fg || v > 0) v = static_cast<float>((v - mean) * inv);
  return out;
}

Grid resampled_grid(const Grid& grid, const Vec3& spacing) {
  Grid g = grid;
  Vec3 shift{};
  for (int a = 0; a < 3; ++a) {
    if (!std::isfinite(spacing[a]) || !(spacing[a] > 0))
      throw std::invalid_argument("resample: spacing " + std::to_string(spacing[a]) + " mm along " + "xyz"[a] +
                                  " must be finite and > 0");
    const double n = std::round(static_cast<double>(grid.dims[a]) * grid.spacing[a] / spacing[a]);
    if (n > static_cast<double>(kMaxVoxels))
      throw std::invalid_argument("resample: " + std::to_string(spacing[a]) + " mm along " + "xyz"[a] + " needs " +
                                  std::to_string(n) + " voxels, more than the " + std::to_string(kMaxVoxels) +
                                  " allowed");
    g.dims[a] = std::max<int64_t>(1, static_cast<int64_t>(n));
    g.spacing[a] = spacing[a];
    shift[a] = (spacing[a] - grid.spacing[a]) / 2;
  }
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) g.origin[r] += grid.direction[3 * r + c] * shift[c];
  check_grid(g, "resample: new grid");
  return g;
}

Volume resample(const Volume& image, const Vec3& spacing) {
  const Grid g = resampled_grid(image.grid, spacing);
  const AxisTaps tx = axis_taps(image.nx(), image.grid.spacing[0], g.dims[0], spacing[0]);
  const AxisTaps ty = axis_taps(image.ny(), image.grid.spacing[1], g.dims[1], spacing[1]);
  const AxisTaps tz = axis_taps(image.nz(), image.grid.spacing[2], g.dims[2], spacing[2]);
  Volume out(g);
  for (int64_t z = 0; z < g.dims[2]; ++z)
    for (int64_t y = 0; y < g.dims[1]; ++y) {
      // The four source rows around (y, z), blended along y and z first.
      const float wy = ty.w[y], wz = tz.w[z];
      const float* r00 = &image.at(0, ty.lo[y], tz.lo[z]);
      const float* r01 = &image.at(0, ty.hi[y], tz.lo[z]);
      const float* r10 = &image.at(0, ty.lo[y], tz.hi[z]);
      const float* r11 = &image.at(0, ty.hi[y], tz.hi[z]);
      float* dst = &out.at(0, y, z);
      for (int64_t x = 0; x < g.dims[0]; ++x) {
        auto yz = [&](int64_t i) {
          const float a = r00[i] + wy * (r01[i] - r00[i]);
          const float b = r10[i] + wy * (r11[i] - r10[i]);
          return a + wz * (b - a);
        };
        const float lo = yz(tx.lo[x]), hi = yz(tx.hi[x]);
        dst[x] = lo + tx.w[x] * (hi - lo);
      }
    }
  return out;
}

LabelVolume resample(const LabelVolume& labels, const Vec3& spacing) {
  const Grid g = resampled_grid(labels.grid, spacing);
  auto nearest = [](const AxisTaps& t) {
    std::vector<int64_t> idx(t.lo.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = t.w[i] < 0.5f ? t.lo[i] : t.hi[i];
    return idx;
  };
  const auto ix = nearest(axis_taps(labels.nx(), labels.grid.spacing[0], g.dims[0], spacing[0]));
  const auto iy = nearest(axis_taps(labels.ny(), labels.grid.spacing[1], g.dims[1], spacing[1]));
  const auto iz = nearest(axis_taps(labels.nz(), labels.grid.spacing[2], g.dims[2], spacing[2]));
  LabelVolume out(g);
  for (int64_t z = 0; z < g.dims[2]; ++z)
    for (int64_t y = 0; y < g.dims[1]; ++y) {
      const uint8_t* src = &labels.at(0, iy[y], iz[z]);
      uint8_t* dst = &out.at(0, y, z);
      for (int64_t x = 0; x < g.dims[0]; ++x) dst[x] = src[ix[x]];
    }
  return out;
}

Volume crop(const Volume& image, const Box& box, float fill) { return crop_any(image, box, fill); }
LabelVolume crop(const LabelVolume& labels, const Box& box, uint8_t fill) { return crop_any(labels, box, fill); }

Box random_crop_box(const Grid& grid, const Dims3& size, engine::Generator& gen, const LabelVolume* labels,
                    float foreground_probability) {
  check_probability(foreground_probability, "random_crop_box");
  for (int a = 0; a < 3; ++a)
    if (size[a] < 1)
      throw std::invalid_argument("random_crop_box: size along " + std::string(1, "xyz"[a]) + " is " +
                                  std::to_string(size[a]) + ", expected >= 1");
  if (labels && labels->grid.dims != grid.dims)
    throw std::invalid_argument("random_crop_box: labels are not on the image's grid");

  Box box;
  box.size = size;
  auto overhang = [&](int a) { return -((size[a] - grid.dims[a]) / 2); };
  if (!labels) {
    for (int a = 0; a < 3; ++a)
      box.start[a] =
          size[a] <= grid.dims[a] ? static_cast<int64_t>(gen.below(grid.dims[a] - size[a] + 1)) : overhang(a);
    return box;
  }

  int64_t n_fg = 0;
  for (uint8_t c : labels->voxels) n_fg += c > 0;
  const int64_t n_bg = static_cast<int64_t>(labels->voxels.size()) - n_fg;
  bool fg = gen.uniform(0.0f, 1.0f) < foreground_probability;
  if (fg && n_fg == 0) fg = false;
  if (!fg && n_bg == 0) fg = true;
  // The k-th voxel of the chosen kind, in storage order, is the centre.
  int64_t k = static_cast<int64_t>(gen.below(static_cast<uint64_t>(fg ? n_fg : n_bg)));
  int64_t centre = 0;
  for (size_t i = 0; i < labels->voxels.size(); ++i)
    if ((labels->voxels[i] > 0) == fg && k-- == 0) {
      centre = static_cast<int64_t>(i);
      break;
    }
  const int64_t nx = grid.dims[0], ny = grid.dims[1];
  const Dims3 c{centre % nx, centre / nx % ny, centre / (nx * ny)};
  for (int a = 0; a < 3; ++a)
    box.start[a] =
        size[a] <= grid.dims[a] ? std::clamp<int64_t>(c[a] - size[a] / 2, 0, grid.dims[a] - size[a]) : overhang(a);
  return box;
}

Sample random_crop(const Volume& image, const LabelVolume& labels, const Dims3& size, float foreground_probability,
                   engine::Generator& gen, float image_fill) {
  if (!same_grid(image.grid, labels.grid))
    throw std::invalid_argument("random_crop: the image and its labels are on different grids");
  const Box box = random_crop_box(image.grid, size, gen, &labels, foreground_probability);
  return {crop(image, box, image_fill), crop(labels, box, uint8_t{0})};
}

void flip_(Volume& v, int axis) { flip_any(v, axis); }
void flip_(LabelVolume& v, int axis) { flip_any(v, axis); }

std::array<bool, 3> random_flip_(Volume& image, LabelVolume& labels, float probability, engine::Generator& gen) {
  check_probability(probability, "random_flip_");
  if (!same_grid(image.grid, labels.grid))
    throw std::invalid_argument("random_flip_: the image and its labels are on different grids");
  std::array<bool, 3> flipped{};
  for (int a = 0; a < 3; ++a) {
    flipped[a] = gen.uniform(0.0f, 1.0f) < probability;
    if (flipped[a]) {
      flip_(image, a);
      flip_(labels, a);
    }
  }
  return flipped;
}

std::array<bool, 3> random_flip_(Volume& image, float probability, engine::Generator& gen) {
  check_probability(probability, "random_flip_");
  std::array<bool, 3> flipped{};
  for (int a = 0; a < 3; ++a) {
    flipped[a] = gen.uniform(0.0f, 1.0f) < probability;
    if (flipped[a]) flip_(image, a);
  }
  return flipped;
}

}  // namespace quartet::medical3d

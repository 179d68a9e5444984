#include "gui/volume_slices.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace quartet::gui {

using medical3d::Grid;
using medical3d::LabelVolume;
using medical3d::Volume;

int64_t slice_count(const Grid& g, Plane plane) {
  switch (plane) {
    case Plane::axial: return g.nz();
    case Plane::coronal: return g.ny();
    case Plane::sagittal: return g.nx();
  }
  return 0;
}

namespace {

struct SliceGeometry {
  int64_t width, height;
};

SliceGeometry geometry(const Grid& g, Plane plane) {
  switch (plane) {
    case Plane::axial: return {g.nx(), g.ny()};
    case Plane::coronal: return {g.nx(), g.nz()};
    case Plane::sagittal: return {g.ny(), g.nz()};
  }
  return {0, 0};
}

}  // namespace

std::array<int64_t, 3> slice_voxel(const Grid& g, Plane plane, int64_t s, int64_t u, int64_t v) {
  switch (plane) {
    case Plane::axial: return {u, v, s};                       // anterior (low y) up
    case Plane::coronal: return {u, s, g.nz() - 1 - v};        // superior (high z) up
    case Plane::sagittal: return {s, u, g.nz() - 1 - v};
  }
  return {0, 0, 0};
}

SlicePoint voxel_point(const Grid& g, Plane plane, const std::array<int64_t, 3>& voxel) {
  const auto [x, y, z] = voxel;
  switch (plane) {
    case Plane::axial: return {z, x, y};
    case Plane::coronal: return {y, x, g.nz() - 1 - z};
    case Plane::sagittal: return {x, y, g.nz() - 1 - z};
  }
  return {0, 0, 0};
}

// LPS: x grows to the patient's left, y to posterior, z to superior; pixel u grows with x
// (axial, coronal) or y (sagittal), and v with y (axial) or against z.
EdgeLetters edge_letters(Plane plane) {
  switch (plane) {
    case Plane::axial: return {"R", "L", "A", "P"};
    case Plane::coronal: return {"R", "L", "S", "I"};
    case Plane::sagittal: return {"A", "P", "S", "I"};
  }
  return {"", "", "", ""};
}

QColor class_color(int c) {
  static const QColor kColors[] = {QColor(230, 40, 40), QColor(250, 210, 30), QColor(40, 200, 230),
                                   QColor(90, 220, 90), QColor(200, 90, 230), QColor(255, 140, 0)};
  return kColors[(std::max(c, 1) - 1) % 6];
}

QImage slice_image(const Volume& image, Plane plane, int64_t index, const SliceStyle& style, const LabelVolume* mask) {
  const Grid& g = image.grid;
  if (mask && mask->grid.dims != g.dims)
    throw std::invalid_argument("the mask's size (" + std::to_string(mask->nx()) + "×" + std::to_string(mask->ny()) +
                                "×" + std::to_string(mask->nz()) + ") differs from the image's (" +
                                std::to_string(g.nx()) + "×" + std::to_string(g.ny()) + "×" + std::to_string(g.nz()) +
                                ")");
  const int64_t s = std::clamp<int64_t>(index, 0, slice_count(g, plane) - 1);
  const SliceGeometry geo = geometry(g, plane);
  QImage out(static_cast<int>(geo.width), static_cast<int>(geo.height), QImage::Format_RGB32);
  const double lo = style.level - style.window / 2.0;
  const double scale = style.window > 0 ? 255.0 / style.window : 0.0;
  for (int64_t v = 0; v < geo.height; ++v) {
    auto* row = reinterpret_cast<QRgb*>(out.scanLine(static_cast<int>(v)));
    for (int64_t u = 0; u < geo.width; ++u) {
      const auto [x, y, z] = slice_voxel(g, plane, s, u, v);
      const double grey = std::clamp((image.at(x, y, z) - lo) * scale, 0.0, 255.0);
      double r = grey, gr = grey, b = grey;
      if (mask) {
        if (const uint8_t c = mask->at(x, y, z); c != 0) {
          const QColor k = class_color(c);
          const double a = style.mask_opacity;
          r = (1 - a) * r + a * k.red();
          gr = (1 - a) * gr + a * k.green();
          b = (1 - a) * b + a * k.blue();
        }
      }
      row[u] = qRgb(static_cast<int>(r + 0.5), static_cast<int>(gr + 0.5), static_cast<int>(b + 0.5));
    }
  }
  return out;
}

double pixel_aspect(const Grid& g, Plane plane) {
  switch (plane) {
    case Plane::axial: return g.spacing[1] / g.spacing[0];
    case Plane::coronal: return g.spacing[2] / g.spacing[0];
    case Plane::sagittal: return g.spacing[2] / g.spacing[1];
  }
  return 1.0;
}

SliceStyle default_style(const Volume& image) {
  SliceStyle style;
  if (image.voxels.empty()) return style;
  std::vector<float> sample;
  const size_t step = std::max<size_t>(1, image.voxels.size() / 200000);
  for (size_t i = 0; i < image.voxels.size(); i += step) sample.push_back(image.voxels[i]);
  std::sort(sample.begin(), sample.end());
  const double p1 = sample[sample.size() / 100], p99 = sample[sample.size() * 99 / 100];
  if (sample.front() < -900.0 && p99 < 3100.0) return style;  // CT in HU: the soft-tissue window
  style.window = std::max(p99 - p1, 1e-6);
  style.level = (p99 + p1) / 2.0;
  return style;
}

}  // namespace quartet::gui

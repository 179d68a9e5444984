#include "medical3d/volume.h"

#include <cmath>
#include <cstdio>

namespace quartet::medical3d {

Vec3 Grid::world(double i, double j, double k) const {
  const double s[3] = {spacing[0] * i, spacing[1] * j, spacing[2] * k};
  Vec3 p = origin;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) p[r] += direction[3 * r + c] * s[c];
  return p;
}

void check_grid(const Grid& g, const std::string& what) {
  const char* axis = "xyz";
  int64_t count = 1;
  for (int a = 0; a < 3; ++a) {
    if (g.dims[a] < 1 || g.dims[a] > kMaxVoxels)
      throw std::invalid_argument(what + ": size along " + axis[a] + " is " + std::to_string(g.dims[a]) +
                                  ", expected 1 to " + std::to_string(kMaxVoxels));
    count *= g.dims[a];  // cannot overflow: each factor and the running product are <= 2^31
    if (count > kMaxVoxels)
      throw std::invalid_argument(what + ": " + std::to_string(g.dims[0]) + "x" + std::to_string(g.dims[1]) + "x" +
                                  std::to_string(g.dims[2]) + " voxels is more than the " + std::to_string(kMaxVoxels) +
                                  " allowed");
    if (!std::isfinite(g.spacing[a]) || g.spacing[a] <= 0)
      throw std::invalid_argument(what + ": spacing along " + axis[a] + " is " + std::to_string(g.spacing[a]) +
                                  " mm, expected a finite value > 0");
    if (!std::isfinite(g.origin[a])) throw std::invalid_argument(what + ": origin is not finite");
    double norm2 = 0;
    for (int r = 0; r < 3; ++r) {
      const double d = g.direction[3 * r + a];
      if (!std::isfinite(d)) throw std::invalid_argument(what + ": direction is not finite");
      norm2 += d * d;
    }
    if (std::abs(std::sqrt(norm2) - 1) > 1e-3)
      throw std::invalid_argument(what + ": direction of axis " + axis[a] + " has length " +
                                  std::to_string(std::sqrt(norm2)) + ", expected a unit vector");
  }
  // Axes that are (nearly) parallel map several voxels to one place: a singular affine.
  const auto& d = g.direction;
  const double det = d[0] * (d[4] * d[8] - d[5] * d[7]) - d[1] * (d[3] * d[8] - d[5] * d[6]) +
                     d[2] * (d[3] * d[7] - d[4] * d[6]);
  if (!(std::abs(det) >= kMinDirectionDeterminant)) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", det);
    static_assert(kMinDirectionDeterminant == 0.01, "the message below says 0.01");
    throw std::invalid_argument(what + ": the axes' directions have determinant " + text +
                                ": the affine is singular (two axes point the same way); expected three independent "
                                "axes, |determinant| >= 0.01");
  }
}

bool same_grid(const Grid& a, const Grid& b, double tolerance) {
  if (a.dims != b.dims) return false;
  for (int i = 0; i < 3; ++i)
    if (std::abs(a.spacing[i] - b.spacing[i]) > tolerance || std::abs(a.origin[i] - b.origin[i]) > tolerance)
      return false;
  for (int i = 0; i < 9; ++i)
    if (std::abs(a.direction[i] - b.direction[i]) > tolerance) return false;
  return true;
}

LabelVolume to_labels(const Volume& v, const std::string& what) {
  LabelVolume out;
  out.grid = v.grid;
  out.voxels.resize(v.voxels.size());
  for (size_t i = 0; i < v.voxels.size(); ++i) {
    const float x = v.voxels[i];
    if (!(x >= 0 && x <= 255) || x != std::floor(x)) {
      const int64_t n = static_cast<int64_t>(i);
      const int64_t nx = v.grid.dims[0], ny = v.grid.dims[1];
      throw std::invalid_argument(what + ": voxel (" + std::to_string(n % nx) + ", " + std::to_string(n / nx % ny) +
                                  ", " + std::to_string(n / (nx * ny)) + ") holds " + std::to_string(x) +
                                  ", expected a class index: an integer in [0, 255]");
    }
    out.voxels[i] = static_cast<uint8_t>(x);
  }
  return out;
}

std::array<int64_t, 256> class_counts(const LabelVolume& v) {
  std::array<int64_t, 256> counts{};
  for (uint8_t c : v.voxels) ++counts[c];
  return counts;
}

int64_t non_finite_voxels(const Volume& v) {
  int64_t n = 0;
  for (float x : v.voxels) n += std::isfinite(x) ? 0 : 1;
  return n;
}

int64_t replace_non_finite(Volume& v, float value) {
  int64_t n = 0;
  for (float& x : v.voxels)
    if (!std::isfinite(x)) {
      x = value;
      ++n;
    }
  return n;
}

}  // namespace quartet::medical3d

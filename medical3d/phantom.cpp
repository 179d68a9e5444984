#include "medical3d/phantom.h"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <stdexcept>
#include <vector>

#include "engine/random.h"

namespace quartet::medical3d {
namespace {

// Shapes live in normalised coordinates: u in (-1, 1) across the volume on each axis, so
// the anatomy is the same at every size, only sampled more finely.
struct Ellipsoid {
  Vec3 centre{};
  Vec3 radii{1, 1, 1};
  double angle = 0;  // rotation about z, radians

  // < 1 inside, 1 on the surface.
  double level(const Vec3& u) const {
    const double dx = u[0] - centre[0], dy = u[1] - centre[1], dz = u[2] - centre[2];
    const double c = std::cos(angle), s = std::sin(angle);
    const double x = (c * dx + s * dy) / radii[0], y = (-s * dx + c * dy) / radii[1], z = dz / radii[2];
    return x * x + y * y + z * z;
  }
  bool contains(const Vec3& u) const { return level(u) < 1; }
};

struct Lesion {
  Ellipsoid core, satellite;  // spheres: a blob is their union
  float hu = 0, mr = 0;
  bool contains(const Vec3& u) const { return core.contains(u) || satellite.contains(u); }
};

// Every random choice about the body, drawn in a fixed order from the seed.
struct Anatomy {
  Ellipsoid body, inner;  // skin and the inside of the fat layer
  Ellipsoid liver, kidney_right, kidney_left;
  Vec3 spine_centre{};  // a cylinder along z: only x, y used
  Vec3 spine_radii{};
  std::vector<Lesion> lesions;
};

Vec3 random_unit(engine::Generator& gen) {
  for (;;) {
    const Vec3 v{gen.uniform(-1, 1), gen.uniform(-1, 1), gen.uniform(-1, 1)};
    const double n = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    if (n > 0.1 && n <= 1) return {v[0] / n, v[1] / n, v[2] / n};
  }
}

Anatomy draw_anatomy(engine::Generator& gen) {
  auto jitter = [&](double a) {
    return static_cast<double>(gen.uniform(static_cast<float>(-a), static_cast<float>(a)));
  };
  auto scale = [&] { return static_cast<double>(gen.uniform(0.9f, 1.1f)); };
  Anatomy a;
  a.body.centre = {jitter(0.03), jitter(0.03), 0};
  a.body.radii = {0.82 * scale(), 0.60 * scale(), 1.3};
  const double fat = 0.04 + gen.uniform(0.0f, 0.03f);
  a.inner = a.body;
  a.inner.radii = {a.body.radii[0] - fat, a.body.radii[1] - fat, a.body.radii[2] - fat};

  // Patient's right is -x (LPS), posterior +y, superior +z.
  a.liver.centre = {-0.30 + jitter(0.05), -0.08 + jitter(0.05), 0.12 + jitter(0.05)};
  a.liver.radii = {0.34 * scale(), 0.28 * scale(), 0.30 * scale()};
  a.liver.angle = jitter(0.25);
  a.kidney_right.centre = {-0.30 + jitter(0.03), 0.30 + jitter(0.03), -0.42 + jitter(0.03)};
  a.kidney_right.radii = {0.11 * scale(), 0.09 * scale(), 0.18 * scale()};
  a.kidney_right.angle = jitter(0.2);
  a.kidney_left.centre = {0.30 + jitter(0.03), 0.30 + jitter(0.03), -0.38 + jitter(0.03)};
  a.kidney_left.radii = {0.11 * scale(), 0.09 * scale(), 0.18 * scale()};
  a.kidney_left.angle = jitter(0.2);
  a.spine_centre = {jitter(0.02), 0.40 + jitter(0.02), 0};
  a.spine_radii = {0.09 * scale(), 0.08 * scale(), 1};

  // Lesions: centred within 35 % of the liver's radii, so each holds at least the voxel
  // nearest its centre even at 32^3 (a radius of 0.12 is 1.9 voxels there).
  const int count = 1 + static_cast<int>(gen.below(2));
  for (int i = 0; i < count; ++i) {
    const Vec3 d = random_unit(gen);
    const double rho = gen.uniform(0.0f, 0.35f);
    const double c = std::cos(a.liver.angle), s = std::sin(a.liver.angle);
    // The point rho * radii * d in the liver's frame, rotated back into the volume's.
    const double lx = rho * a.liver.radii[0] * d[0], ly = rho * a.liver.radii[1] * d[1];
    Lesion l;
    l.core.centre = {a.liver.centre[0] + c * lx - s * ly, a.liver.centre[1] + s * lx + c * ly,
                     a.liver.centre[2] + rho * a.liver.radii[2] * d[2]};
    const double r = gen.uniform(0.12f, 0.17f);
    l.core.radii = {r, r, r};
    const Vec3 e = random_unit(gen);
    l.satellite.centre = {l.core.centre[0] + 0.6 * r * e[0], l.core.centre[1] + 0.6 * r * e[1],
                          l.core.centre[2] + 0.6 * r * e[2]};
    l.satellite.radii = {0.6 * r, 0.6 * r, 0.6 * r};
    l.hu = gen.uniform(0.0f, 15.0f);
    l.mr = gen.uniform(150.0f, 220.0f);
    a.lesions.push_back(l);
  }
  return a;
}

enum class Tissue : uint8_t { air, fat, soft, kidney, bone, liver, lesion };

// Intensity of each tissue for one modality; lesions carry their own.
struct Contrast {
  float air, fat, soft, kidney, bone, liver;
};
constexpr Contrast kCt{-1000, -100, 40, 30, 700, 60};
constexpr Contrast kMr{0, 900, 300, 380, 600, 520};

// The table in phantom.h; scanner 0 is the reference phantom.
constexpr ScannerProfile kCtScanners[kPhantomScanners] = {
    {"reference", 10, 1.0f, 0, 0, 0, 0},
    {"low dose", 40, 1.0f, 0, 0, 0, 0},
    {"smooth kernel", 6, 1.1f, 40, 0, 8, 0},
    {"thick slices", 20, 0.9f, -30, 0, 0, 12},
};
constexpr ScannerProfile kMrScanners[kPhantomScanners] = {
    {"reference", 20, 1.0f, 0, 1.0f, 0, 0},
    {"low field", 45, 0.6f, 0, 0.5f, 0, 0},
    {"surface coil", 15, 1.4f, 0, 4.0f, 0, 0},
    {"thick slices", 30, 1.0f, 0, 2.0f, 0, 12},
};

// The tissue at u, and which lesion when it is one. Where organs overlap, the liver wins,
// then bone, then the kidneys.
Tissue tissue_at(const Anatomy& a, const Vec3& u, int& lesion) {
  if (!a.body.contains(u)) return Tissue::air;
  if (!a.inner.contains(u)) return Tissue::fat;
  if (a.liver.contains(u)) {
    for (size_t i = 0; i < a.lesions.size(); ++i)
      if (a.lesions[i].contains(u)) {
        lesion = static_cast<int>(i);
        return Tissue::lesion;
      }
    return Tissue::liver;
  }
  const double sx = (u[0] - a.spine_centre[0]) / a.spine_radii[0], sy = (u[1] - a.spine_centre[1]) / a.spine_radii[1];
  if (sx * sx + sy * sy < 1) return Tissue::bone;
  if (a.kidney_right.contains(u) || a.kidney_left.contains(u)) return Tissue::kidney;
  return Tissue::soft;
}

float intensity(Tissue t, const Contrast& c, const Anatomy& a, int lesion, bool ct) {
  switch (t) {
    case Tissue::air:
      return c.air;
    case Tissue::fat:
      return c.fat;
    case Tissue::soft:
      return c.soft;
    case Tissue::kidney:
      return c.kidney;
    case Tissue::bone:
      return c.bone;
    case Tissue::liver:
      return c.liver;
    case Tissue::lesion:
      return ct ? a.lesions[lesion].hu : a.lesions[lesion].mr;
  }
  return c.air;
}

// A smooth multiplicative field: exp of a random quadratic in u.
struct BiasField {
  double linear[3];
  double quadratic[6];  // xx, yy, zz, xy, xz, yz
  double at(const Vec3& u) const {
    const double q = quadratic[0] * u[0] * u[0] + quadratic[1] * u[1] * u[1] + quadratic[2] * u[2] * u[2] +
                     quadratic[3] * u[0] * u[1] + quadratic[4] * u[0] * u[2] + quadratic[5] * u[1] * u[2];
    return std::exp(linear[0] * u[0] + linear[1] * u[1] + linear[2] * u[2] + q);
  }
};

// Gaussian blur along `axis` (0 x, 1 y, 2 z) with sigma in voxels; edges repeat the last voxel.
void blur_axis(Volume& v, int axis, double sigma) {
  const int64_t radius = static_cast<int64_t>(std::ceil(3 * sigma));
  std::vector<double> kernel(static_cast<size_t>(2 * radius + 1));
  double total = 0;
  for (int64_t j = -radius; j <= radius; ++j)
    total += kernel[static_cast<size_t>(j + radius)] = std::exp(-0.5 * static_cast<double>(j * j) / (sigma * sigma));
  for (double& k : kernel) k /= total;
  const Dims3 d = v.grid.dims;
  const int64_t stride = axis == 0 ? 1 : axis == 1 ? d[0] : d[0] * d[1], n = d[static_cast<size_t>(axis)];
  std::vector<float> out(v.voxels.size());
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
    const int64_t c = (i / stride) % n;
    double sum = 0;
    for (int64_t j = -radius; j <= radius; ++j) {
      const int64_t at = i + (std::clamp(c + j, int64_t{0}, n - 1) - c) * stride;
      sum += kernel[static_cast<size_t>(j + radius)] * v.voxels[at];
    }
    out[i] = static_cast<float>(sum);
  }
  v.voxels = std::move(out);
}

// A reconstruction kernel or slice profile: sigma_mm per axis, 0 for none.
void blur(Volume& v, const Vec3& sigma_mm) {
  for (int axis = 0; axis < 3; ++axis)
    if (sigma_mm[axis] > 0) blur_axis(v, axis, sigma_mm[axis] / v.grid.spacing[axis]);
}

}  // namespace

PhantomKind parse_phantom_kind(const std::string& name) {
  if (name == "ct") return PhantomKind::ct;
  if (name == "mri") return PhantomKind::mri;
  throw std::invalid_argument("phantom kind \"" + name + "\": expected ct or mri");
}

const char* to_string(PhantomKind kind) { return kind == PhantomKind::ct ? "ct" : "mri"; }

std::ostream& operator<<(std::ostream& out, PhantomKind kind) { return out << to_string(kind); }

const ScannerProfile& scanner_profile(PhantomKind kind, int scanner) {
  if (scanner < 0 || scanner >= kPhantomScanners)
    throw std::invalid_argument("phantom scanner " + std::to_string(scanner) + ": expected 0 to " +
                                std::to_string(kPhantomScanners - 1));
  return (kind == PhantomKind::ct ? kCtScanners : kMrScanners)[scanner];
}

Sample make_phantom(PhantomKind kind, int64_t size, uint64_t seed, int scanner) {
  if (size < kMinPhantomSize || size > kMaxPhantomSize)
    throw std::invalid_argument("phantom size " + std::to_string(size) + ": expected " +
                                std::to_string(kMinPhantomSize) + " to " + std::to_string(kMaxPhantomSize));
  const ScannerProfile& profile = scanner_profile(kind, scanner);
  engine::Generator gen(seed);
  const Anatomy anatomy = draw_anatomy(gen);
  const bool ct = kind == PhantomKind::ct;
  BiasField bias{};
  if (!ct) {
    for (double& c : bias.linear) c = gen.uniform(-0.08f, 0.08f) * profile.bias;
    for (double& c : bias.quadratic) c = gen.uniform(-0.04f, 0.04f) * profile.bias;
  }

  Grid g;
  g.dims = {size, size, size};
  const double mm = kPhantomFieldOfViewMm / static_cast<double>(size);
  g.spacing = {mm, mm, mm};
  const double half = -0.5 * static_cast<double>(size - 1) * mm;
  g.origin = {half, half, half};
  Sample out{Volume(g), LabelVolume(g)};

  // Voxel centres in normalised coordinates, per axis.
  std::vector<double> u(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) u[i] = 2.0 * (static_cast<double>(i) + 0.5) / static_cast<double>(size) - 1.0;
  const Contrast& contrast = ct ? kCt : kMr;
  for (int64_t z = 0; z < size; ++z)
    for (int64_t y = 0; y < size; ++y)
      for (int64_t x = 0; x < size; ++x) {
        int lesion = -1;
        const Tissue t = tissue_at(anatomy, {u[x], u[y], u[z]}, lesion);
        out.image.at(x, y, z) = intensity(t, contrast, anatomy, lesion, ct);
        out.labels.at(x, y, z) = t == Tissue::lesion  ? kLesionClass
                                 : t == Tissue::liver ? kOrganClass
                                                      : kBackgroundClass;
      }
  blur(out.image, {profile.blur_xy_mm, profile.blur_xy_mm, profile.blur_z_mm});
  // The noise is drawn voxel by voxel in the order above, after the anatomy, so scanner 0
  // draws the stream it always drew.
  for (int64_t z = 0; z < size; ++z)
    for (int64_t y = 0; y < size; ++y)
      for (int64_t x = 0; x < size; ++x) {
        const float clean = out.image.at(x, y, z);
        float v;
        if (ct) {
          v = std::clamp(profile.gain * clean + profile.offset + gen.normal(0, profile.noise), -1024.0f, 3071.0f);
        } else {
          const double s = clean * bias.at({u[x], u[y], u[z]}) * profile.gain;
          const double re = s + gen.normal(0, profile.noise), im = gen.normal(0, profile.noise);
          v = static_cast<float>(std::sqrt(re * re + im * im));
        }
        out.image.at(x, y, z) = v;
      }
  return out;
}

uint64_t phantom_case_seed(uint64_t seed, int64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace quartet::medical3d

#pragma once

// Seeded procedural phantoms: an abdomen-like CT or MRI volume and its segmentation.
//
// Anatomy, in a cube of kPhantomFieldOfViewMm on each side (LPS, axial slices along z):
// a body ellipsoid with a layer of subcutaneous fat, a liver on the patient's right, two
// kidneys below and behind it, a vertebral body at the back, and 1 or 2 lesions (blobs
// of two overlapping spheres) inside the liver. A seed fixes every position, radius and
// rotation, and the noise; the same seed gives the same anatomy in CT and in MRI.
//
// Classes (kPhantomClasses = 3):
//   0 background   everything that is not liver (air, fat, tissue, kidneys, bone)
//   1 organ        the liver
//   2 lesion       lesions, always inside the liver
//
// CT, in HU: air -1000, fat -100, soft tissue 40, liver 60, kidneys 30, bone 700, lesions
// hypodense at 0 to 15; then Gaussian noise (sigma 10 HU), clamped to [-1024, 3071].
// MRI (T1-weighted-like, arbitrary units): air 0, fat 900, tissue 300, liver 520, kidneys
// 380, marrow 600, lesions 150 to 220; times a smooth bias field (exp of a random
// quadratic, within about +-40 % inside the body); then Rician noise (sigma 20): the
// magnitude of the signal plus complex Gaussian noise, so it is > 0 everywhere, air too.
//
// Scanners: a phantom can be acquired on one of kPhantomScanners scanners, each with a
// fixed profile that changes the image, never the anatomy or the labels (the same seed gives
// the same labels on every scanner). Scanner 0 is the reference above. CT profiles set the
// noise (dose), a calibration gain and offset (HU' = gain * HU + offset, before the noise)
// and a Gaussian blur of the clean image (a smooth reconstruction kernel in-plane, thick
// slices along z); MRI profiles set the noise, an intensity scale and the strength of the
// bias field (its exponent times `bias`):
//   CT   0 reference        sigma 10 HU, gain 1,    offset   0 HU, no blur
//   CT   1 low dose         sigma 40 HU, gain 1,    offset   0 HU, no blur
//   CT   2 smooth kernel    sigma  6 HU, gain 1.1,  offset +40 HU, blur sigma 8 mm in-plane
//   CT   3 thick slices     sigma 20 HU, gain 0.9,  offset -30 HU, blur sigma 12 mm along z
//   MRI  0 reference        sigma 20,    scale 1,   bias x1
//   MRI  1 low field        sigma 45,    scale 0.6, bias x0.5
//   MRI  2 surface coil     sigma 15,    scale 1.4, bias x4
//   MRI  3 thick slices     sigma 30,    scale 1,   bias x2, blur sigma 12 mm along z
//
// The voxel grid is size^3, isotropic, centred on the origin, with direction identity.
// Contrasts and sizes are chosen so the task is learnable at 32^3 (the liver spans about
// 10 voxels, a lesion 4 to 5).

#include <cstdint>
#include <iosfwd>
#include <string>

#include "medical3d/volume.h"

namespace quartet::medical3d {

enum class PhantomKind { ct, mri };

inline constexpr uint8_t kBackgroundClass = 0;
inline constexpr uint8_t kOrganClass = 1;
inline constexpr uint8_t kLesionClass = 2;
inline constexpr int kPhantomClasses = 3;
inline constexpr int64_t kMinPhantomSize = 32;
inline constexpr int64_t kMaxPhantomSize = 256;
inline constexpr double kPhantomFieldOfViewMm = 320;
inline constexpr int kPhantomScanners = 4;

// How one scanner acquires a phantom (the table above).
struct ScannerProfile {
  const char* name;
  float noise;        // CT: Gaussian sigma, HU; MRI: Rician sigma
  float gain;         // CT: HU multiplier; MRI: intensity scale
  float offset;       // CT: HU added; MRI: unused (0)
  float bias;         // MRI: multiplies the bias field's exponent; CT: unused (0)
  double blur_xy_mm;  // Gaussian sigma of the clean image's blur in x and y; 0: none
  double blur_z_mm;   // and along z
};

// requires 0 <= scanner < kPhantomScanners (else std::invalid_argument naming the range).
const ScannerProfile& scanner_profile(PhantomKind kind, int scanner);

// "ct" or "mri"; throws std::invalid_argument naming the choices otherwise.
PhantomKind parse_phantom_kind(const std::string& name);
const char* to_string(PhantomKind kind);
// Writes to_string(kind), so a kind prints as its name (in gtest's test names too).
std::ostream& operator<<(std::ostream& out, PhantomKind kind);

// A size^3 phantom and its labels, acquired on `scanner`.
// requires kMinPhantomSize <= size <= kMaxPhantomSize and a scanner of scanner_profile
// (else std::invalid_argument)
// ensures the same (kind, size, seed, scanner) gives the same voxels (engine::Generator's
// stream); the same (kind, size, seed) gives the same labels on every scanner; the labels
// hold voxels of all three classes.
Sample make_phantom(PhantomKind kind, int64_t size, uint64_t seed, int scanner = 0);

// The seed of phantom `index` in a set of phantoms made with `seed` (a phantom workload's
// volumes, a Decathlon folder msd.h writes): a SplitMix64 hash, so the cases of seed s do
// not overlap those of seed s + 1, and case i does not depend on how many there are.
uint64_t phantom_case_seed(uint64_t seed, int64_t index);

}  // namespace quartet::medical3d

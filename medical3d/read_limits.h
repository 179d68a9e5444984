#pragma once

// How much an image read from a file may hold. A NIfTI header or a DICOM series comes from
// anywhere and says how much to allocate: the readers check its claim against these limits
// before they allocate or read anything.

#include <cstdint>
#include <string>

#include "medical3d/volume.h"

namespace quartet::medical3d {

// What one voxel of an image costs once read and used: the float image, a normalised
// copy, a mask, and sliding-window inference's per-class sums (a 600^3 CT took 5.1 GB in
// `quartet predict`, 24 bytes a voxel).
inline constexpr int64_t kBytesPerReadVoxel = 32;

// What one voxel costs `quartet predict` with a model of `classes` classes at its peak:
// the normalised image (4 bytes), the windows' per-class sums that become the mean logits
// in place (4 a class), the windows' counts (4) and the mask (1), with 7 to spare (the
// image as read, 4, is freed once normalised).
int64_t predict_bytes_per_voxel(int64_t classes);

struct ReadLimits {
  int64_t max_voxels = kMaxVoxels;                     // voxels of one image, at most kMaxVoxels
  std::string basis = "the most any volume may have";  // where the limit comes from, for messages

  // Half of this machine's memory at `bytes_per_voxel` a voxel, at most kMaxVoxels.
  // `way_past` says how a user goes past it ("--max-voxels"), or is empty.
  static ReadLimits of_this_machine(const std::string& way_past = "", int64_t bytes_per_voxel = kBytesPerReadVoxel);
  // An explicit limit: requires 1 <= voxels <= kMaxVoxels (std::invalid_argument otherwise).
  static ReadLimits at_most(int64_t voxels, const std::string& basis);

  // A command's option: 0 means of_this_machine(option, bytes_per_voxel), another value
  // at_most(voxels, option).
  static ReadLimits from_option(int64_t voxels, const std::string& option,
                                int64_t bytes_per_voxel = kBytesPerReadVoxel);

  // "at most N voxels (BASIS)", for a refusal's "allowed:".
  std::string allowed() const;
};

}  // namespace quartet::medical3d

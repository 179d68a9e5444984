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

struct ReadLimits {
  int64_t max_voxels = kMaxVoxels;                     // voxels of one image, at most kMaxVoxels
  std::string basis = "the most any volume may have";  // where the limit comes from, for messages

  // Half of this machine's memory at kBytesPerReadVoxel a voxel, at most kMaxVoxels.
  // `way_past` says how a user goes past it ("--max-voxels"), or is empty.
  static ReadLimits of_this_machine(const std::string& way_past = "");
  // An explicit limit: requires 1 <= voxels <= kMaxVoxels (std::invalid_argument otherwise).
  static ReadLimits at_most(int64_t voxels, const std::string& basis);

  // A command's option: 0 means of_this_machine(option), another value at_most(voxels, option).
  static ReadLimits from_option(int64_t voxels, const std::string& option);

  // "at most N voxels (BASIS)", for a refusal's "allowed:".
  std::string allowed() const;
};

}  // namespace quartet::medical3d

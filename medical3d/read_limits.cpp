#include "medical3d/read_limits.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "engine/machine.h"

namespace quartet::medical3d {

ReadLimits ReadLimits::of_this_machine(const std::string& way_past) {
  const int64_t memory = engine::physical_memory_bytes();
  ReadLimits limits;
  limits.max_voxels = std::clamp<int64_t>(memory / 2 / kBytesPerReadVoxel, 1, kMaxVoxels);
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.3g", static_cast<double>(memory) / static_cast<double>(int64_t{1} << 30));
  limits.basis = "half of this machine's " + std::string(gib) + " GiB of memory at " +
                 std::to_string(kBytesPerReadVoxel) + " bytes a voxel";
  if (limits.max_voxels == kMaxVoxels) return ReadLimits{};  // no option goes past it
  if (!way_past.empty()) limits.basis += "; " + way_past + " sets another";
  return limits;
}

ReadLimits ReadLimits::at_most(int64_t voxels, const std::string& basis) {
  if (voxels < 1 || voxels > kMaxVoxels)
    throw std::invalid_argument(basis + ": expected 1 to " + std::to_string(kMaxVoxels) + " voxels, got " +
                                std::to_string(voxels));
  return ReadLimits{voxels, basis};
}

ReadLimits ReadLimits::from_option(int64_t voxels, const std::string& option) {
  return voxels == 0 ? of_this_machine(option) : at_most(voxels, option);
}

std::string ReadLimits::allowed() const { return "at most " + std::to_string(max_voxels) + " voxels (" + basis + ")"; }

}  // namespace quartet::medical3d

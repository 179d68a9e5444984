#include "medical3d/read_limits.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "engine/machine.h"

namespace quartet::medical3d {

int64_t predict_bytes_per_voxel(int64_t classes) {
  return 4 + 4 * std::max<int64_t>(classes, 1) + 4 + 1 + 7;
}

ReadLimits ReadLimits::of_this_machine(const std::string& way_past, int64_t bytes_per_voxel) {
  const int64_t memory = engine::physical_memory_bytes();
  ReadLimits limits;
  limits.max_voxels = std::clamp<int64_t>(memory / 2 / bytes_per_voxel, 1, kMaxVoxels);
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.3g", static_cast<double>(memory) / static_cast<double>(int64_t{1} << 30));
  limits.basis = "half of this machine's " + std::string(gib) + " GiB of memory at " +
                 std::to_string(bytes_per_voxel) + " bytes a voxel";
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

ReadLimits ReadLimits::from_option(int64_t voxels, const std::string& option, int64_t bytes_per_voxel) {
  return voxels == 0 ? of_this_machine(option, bytes_per_voxel) : at_most(voxels, option);
}

std::string ReadLimits::allowed() const { return "at most " + std::to_string(max_voxels) + " voxels (" + basis + ")"; }

}  // namespace quartet::medical3d

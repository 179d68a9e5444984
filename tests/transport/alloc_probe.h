#pragma once

// Records the largest single operator new while a probe is alive (any thread), so a
// test can show that a hostile length was refused before anything was allocated for it.

#include <cstddef>

namespace quartet::transport::testing {

class AllocationProbe {
 public:
  AllocationProbe();
  ~AllocationProbe();
  AllocationProbe(const AllocationProbe&) = delete;
  AllocationProbe& operator=(const AllocationProbe&) = delete;
  size_t largest() const;
};

}  // namespace quartet::transport::testing

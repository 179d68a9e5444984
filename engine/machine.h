#pragma once

// What this machine holds, for the limits that keep a run or a file within it.

#include <cstdint>

namespace quartet::engine {

// Bytes of physical memory; 2^62 when the system does not say.
int64_t physical_memory_bytes();

}  // namespace quartet::engine

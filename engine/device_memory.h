#pragma once

// Memory on an accelerator: storage allocation through the device's caching allocator
// (engine/caching_allocator.h) and its statistics for step records. Host memory is
// counted by engine/memory.h; these are the device's own counts. In a build without a
// device backend every call throws the reason (engine::throw_no_backend).
#include <cstddef>
#include <cstdint>

#include "engine/caching_allocator.h"
#include "engine/device.h"

namespace quartet::engine {

// Requires device_available(device). Ordered by the device's compute stream.
void* device_allocate(const Device& device, size_t bytes, MemTag tag);
void device_free(const Device& device, void* p);
void device_retag(const Device& device, void* p, MemTag tag);

struct DeviceMemStats {
  AllocatorStats allocator;  // by tag, allocated and reserved, with peaks
  int64_t device_used = 0;   // the whole device's, every process included
  int64_t device_total = 0;
};
DeviceMemStats device_memory_stats(const Device& device);
void reset_device_memory_peaks(const Device& device);

}  // namespace quartet::engine

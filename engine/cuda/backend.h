#pragma once

// What code outside engine/cuda/ asks of the CUDA backend: whether a device is there,
// and each device's caching allocator. Host C++ with no CUDA types.
#include <string>

#include "engine/caching_allocator.h"

namespace quartet::engine::cuda {

// The CUDA devices this process sees; 0 when there is no driver or no device.
int device_count();
// Why there is no device: the CUDA runtime's answer ("no CUDA-capable device is
// detected"), or "" when there is one.
std::string no_device_reason();
// Device `index`'s allocator, made on first use (requires index < device_count()).
CachingAllocator& allocator(int index);
// Its compute stream as an allocator StreamId.
StreamId compute_stream(int index);

}  // namespace quartet::engine::cuda

#pragma once

// Runs kernel `fn` of the backend of `device`: cpu::fn(...) from engine/cpu/, or its
// twin cuda::fn(...) from engine/cuda/ in a build with CUDA. Kernels take tensors that
// are already allocated and checked; they never record autograd.
#include "engine/device.h"

#if defined(QUARTET_WITH_CUDA)
#include "engine/cuda/kernels.h"
#define QUARTET_DISPATCH(device, fn, ...)                       \
  ((device).is_cpu() ? ::quartet::engine::cpu::fn(__VA_ARGS__) \
                     : ::quartet::engine::cuda::fn(__VA_ARGS__))
#else
#define QUARTET_DISPATCH(device, fn, ...)                       \
  ([&]() -> decltype(auto) {                                    \
    if ((device).is_cpu()) return ::quartet::engine::cpu::fn(__VA_ARGS__); \
    ::quartet::engine::throw_no_backend((device), #fn);          \
  }())
#endif

#pragma once

// Skips a test, saying why, where fewer than `count` CUDA devices are at hand: a build
// without the backend, a machine without a GPU, or too few GPUs.
#include <gtest/gtest.h>

#include "engine/device.h"

#define QUARTET_NEED_GPU(count)                                                                            \
  do {                                                                                                     \
    if (!::quartet::engine::device_available(::quartet::engine::Device::cuda(0)))                          \
      GTEST_SKIP() << ::quartet::engine::device_unavailable_reason(::quartet::engine::Device::cuda(0));    \
    if (::quartet::engine::cuda_device_count() < (count))                                                  \
      GTEST_SKIP() << "needs " << (count) << " GPUs; this machine has " << ::quartet::engine::cuda_device_count(); \
  } while (0)

#pragma once

#include <omp.h>

#include <cstdint>

#include "engine/threads.h"

namespace quartet::engine::cpu {

// Elements below which an element-wise loop stays on one thread: forking costs about as
// much as streaming this many floats.
inline constexpr int64_t kMinParallelElements = int64_t{1} << 16;

// fn(begin, end) over [0, n) in contiguous slices, one per compute thread. Every element
// is computed as on one thread, so results do not depend on the thread count. Below
// `serial_below` items (elements, unless a caller slices coarser units) one thread.
template <class Fn>
void for_slices(int64_t n, Fn&& fn, int64_t serial_below = kMinParallelElements) {
  const int threads = compute_threads();
  if (threads <= 1 || n < serial_below) return fn(int64_t{0}, n);
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), count = omp_get_num_threads();
    fn(n * t / count, n * (t + 1) / count);
  }
}

}  // namespace quartet::engine::cpu

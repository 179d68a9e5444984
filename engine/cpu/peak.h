#pragma once

// The most this machine's cores compute: independent vector FMAs on every thread, no
// memory traffic (AVX-512 where the build targets it, else AVX2, else scalar). Measured,
// as the width and count of FMA units differ between cores that share an ISA (Zen 4 runs
// a 512-bit FMA as two 256-bit halves). `quartet calibrate` and quartet-bench-peak.

namespace quartet::engine::cpu {

// "avx512", "avx2" or "scalar": what fma_peak_flops runs.
const char* fma_isa();

// FLOP/s of `threads` threads each running `iterations` rounds of independent FMAs; the
// best of `reps` timed runs after one untimed one.
double fma_peak_flops(int threads, long iterations, int reps);

// The best of `reps` timed calls of `once` after one untimed call, in seconds.
template <typename F>
double best_seconds(int reps, F&& once);

}  // namespace quartet::engine::cpu

#include <algorithm>
#include <chrono>

template <typename F>
double quartet::engine::cpu::best_seconds(int reps, F&& once) {
  once();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

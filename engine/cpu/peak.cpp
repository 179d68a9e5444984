#include "engine/cpu/peak.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <cmath>
#include <thread>
#include <vector>

namespace quartet::engine::cpu {

namespace {

#if defined(__AVX512F__)
using Vec = __m512;
constexpr const char* kIsa = "avx512";
inline Vec splat(float v) { return _mm512_set1_ps(v); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float lane0(Vec v) { return _mm512_cvtss_f32(v); }
#elif defined(__FMA__)
using Vec = __m256;
constexpr const char* kIsa = "avx2";
inline Vec splat(float v) { return _mm256_set1_ps(v); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float lane0(Vec v) { return _mm256_cvtss_f32(v); }
#else  // no vector FMA in this build: the scalar rate, said so by kIsa
using Vec = float;
constexpr const char* kIsa = "scalar";
inline Vec splat(float v) { return v; }
inline Vec fma(Vec a, Vec b, Vec c) { return std::fma(a, b, c); }
inline float lane0(Vec v) { return v; }
#endif

// Enough independent chains to cover the FMA latency on every unit (4 cycles x 2 units).
constexpr int kChains = 12;
constexpr double kFlopsPerIteration = 2.0 * kChains * sizeof(Vec) / sizeof(float);

// Runs `iterations` rounds of kChains FMAs; the result only keeps the loop alive.
float fma_loop(long iterations) {
  Vec acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = splat(0.001f * static_cast<float>(c));
  const Vec a = splat(0.999999f), b = splat(1e-7f);
  for (long i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = fma(acc[c], a, b);
  float sum = 0.0f;
  for (int c = 0; c < kChains; ++c) sum += lane0(acc[c]);
  return sum;
}

}  // namespace

const char* fma_isa() { return kIsa; }

double fma_peak_flops(int threads, long iterations, int reps) {
  std::vector<float> sink(static_cast<size_t>(threads));
  const double s = best_seconds(reps, [&] {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { sink[t] = fma_loop(iterations); });
    for (std::thread& th : pool) th.join();
  });
  volatile float keep = sink[0];
  (void)keep;
  return kFlopsPerIteration * static_cast<double>(iterations) * threads / s;
}

}  // namespace quartet::engine::cpu

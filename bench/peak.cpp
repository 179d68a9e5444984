// quartet-bench-peak: the two limits bench/run sets the training rates beside, measured at
// a thread count and printed as one JSON line:
//   fma_gflops     independent vector FMAs on every thread, no memory traffic: the most the
//                  cores do (AVX-512 where the build targets it, else AVX2); measured, as
//                  the width and count of FMA units differ between cores that share an ISA
//                  (Zen 4 runs a 512-bit FMA as two 256-bit halves)
//   sgemm_gflops   OpenBLAS's cblas_sgemm on an N x N by N x N product (N = 2048), the best
//                  a real kernel does
// Each is the best of `reps` timed runs after one untimed one.

#include <cblas.h>
#include <immintrin.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

extern "C" void openblas_set_num_threads(int num_threads);

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

template <typename F>
double best_seconds(int reps, F&& once) {
  once();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

double fma_gflops(int threads, long iterations, int reps) {
  std::vector<float> sink(static_cast<size_t>(threads));
  const double s = best_seconds(reps, [&] {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { sink[t] = fma_loop(iterations); });
    for (std::thread& th : pool) th.join();
  });
  volatile float keep = sink[0];
  (void)keep;
  return kFlopsPerIteration * static_cast<double>(iterations) * threads / s / 1e9;
}

double sgemm_gflops(int threads, int n, int reps) {
  openblas_set_num_threads(threads);
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  const double s = best_seconds(reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                c.data(), n);
  });
  return 2.0 * n * n * static_cast<double>(n) / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Measures the FMA peak and OpenBLAS's sgemm rate at a thread count; prints one JSON line"};
  int threads = 1, n = 2048, reps = 3;
  long iterations = 50'000'000;
  app.add_option("--threads", threads, "threads (FMA loops and OpenBLAS alike)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--n", n, "sgemm size: N x N by N x N")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--iterations", iterations, "FMA loop rounds per thread")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--reps", reps, "timed runs of each; the best counts")->check(CLI::PositiveNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const double fma = fma_gflops(threads, iterations, reps);
  const double sgemm = sgemm_gflops(threads, n, reps);
  std::printf("{\"threads\": %d, \"isa\": \"%s\", \"fma_gflops\": %.2f, \"sgemm_n\": %d, \"sgemm_gflops\": %.2f}\n",
              threads, kIsa, fma, n, sgemm);
  return 0;
}

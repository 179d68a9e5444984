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

#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "engine/cpu/peak.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace {

using quartet::engine::cpu::best_seconds;

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
  const double fma = quartet::engine::cpu::fma_peak_flops(threads, iterations, reps) / 1e9;
  const double sgemm = sgemm_gflops(threads, n, reps);
  std::printf("{\"threads\": %d, \"isa\": \"%s\", \"fma_gflops\": %.2f, \"sgemm_n\": %d, \"sgemm_gflops\": %.2f}\n",
              threads, quartet::engine::cpu::fma_isa(), fma, n, sgemm);
  return 0;
}

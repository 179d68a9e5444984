// quartet-bench-gemm: times the engine's matmul (an N x N by N x N product: OpenBLAS-free
// packed kernels on the cpu, cuBLAS on a GPU) and prints one JSON line with its rate in
// TFLOP/s. Each product is followed by a wait for the device, so the time is the
// kernels', not their launch. scripts/gpu-check sets it beside the GPU's fp32 peak.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "engine/device.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "engine/tensor.h"

namespace {

using namespace quartet;

struct Options {
  int64_t n = 4096;
  int reps = 10;
  int warmup = 3;
  std::string device = "cpu";
};

void run(const Options& o) {
  const engine::Device device = engine::Device::parse(o.device);
  if (!engine::device_available(device)) throw std::invalid_argument(engine::device_unavailable_reason(device));
  engine::Generator gen(1);
  engine::Tensor a = engine::Tensor::empty({o.n, o.n}), b = engine::Tensor::empty({o.n, o.n});
  engine::uniform_(a, -1.0f, 1.0f, gen);
  engine::uniform_(b, -1.0f, 1.0f, gen);
  a = a.to(device);
  b = b.to(device);
  for (int i = 0; i < o.warmup; ++i) engine::matmul(a, b);
  engine::device_synchronize(device);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.reps; ++i) engine::matmul(a, b);
  engine::device_synchronize(device);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double flops = 2.0 * static_cast<double>(o.n) * static_cast<double>(o.n) * static_cast<double>(o.n) * o.reps;
  std::printf("{\"device\": \"%s\", \"n\": %lld, \"reps\": %d, \"seconds\": %.6f, \"tflops\": %.3f}\n",
              device.str().c_str(), static_cast<long long>(o.n), o.reps, seconds, flops / seconds / 1e12);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times an N x N matmul on the engine and prints its TFLOP/s as JSON"};
  Options o;
  app.add_option("--n", o.n, "matrix side")->check(CLI::Range(int64_t{1}, int64_t{32768}))->capture_default_str();
  app.add_option("--reps", o.reps, "timed products")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed products first")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--device", o.device, "cpu, cuda or cuda:N")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    run(o);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "quartet-bench-gemm: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quartet-bench-gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}

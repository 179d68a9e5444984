// quartet_kernel_cache_helper: one process of the kernel table's tests, started afresh
// (fork and exec) so that its table, and its OpenMP threads, start empty.
//
//   helper choose FASTEST SLEEP_MS   chooses between "slow" (the rule's) and "fast", its own
//                                    timings saying FASTEST; prints "KERNEL/TIMES_MEASURED"
//   helper conv OUT                  runs one 3D conv under the default policy, writes its
//                                    output's floats to OUT, prints "KERNEL SOURCE"
// The table's file comes from QUARTET_KERNEL_CACHE; warnings go to stderr.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/cpu/conv.h"
#include "engine/cpu/conv_kernel.h"
#include "engine/cpu/kernel_cache.h"
#include "engine/random.h"

using namespace quartet::engine;

namespace {

std::string choose(const std::string& fastest, int sleep_ms) {
  int calls = 0;
  const std::string k = cpu::cached_kernel("conv", "x (1, 2) test shape", {"slow", "fast"}, [&](const std::string& c) {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    return c == fastest ? 0.001 : 0.002;
  });
  return k + "/" + std::to_string(calls);
}

Tensor filled(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  uniform_(t, -1.0f, 1.0f, gen);
  return t;
}

std::string conv(const std::string& out_path) {
  const Tensor x = filled({2, 16, 6, 7, 5}, 1), w = filled({16, 16, 3, 3, 3}, 2);
  Tensor out = Tensor::empty({2, 16, 6, 7, 5});
  cpu::conv_forward(x, w, Tensor(), {.stride = {1, 1, 1}, .padding = {1, 1, 1}, .dilation = {1, 1, 1}}, out);
  const std::vector<float> v = out.to_vector();
  std::ofstream(out_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  const std::vector<cpu::KernelChoice> c = cpu::conv_kernel_choices();
  return c.size() == 1 ? c[0].kernel + " " + c[0].source : "choices: " + std::to_string(c.size());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "choose" && argc == 4) std::printf("%s", choose(argv[2], std::atoi(argv[3])).c_str());
  else if (what == "conv" && argc == 3) std::printf("%s", conv(argv[2]).c_str());
  else return 2;
  return 0;
}

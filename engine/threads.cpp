#include "engine/threads.h"

#include <omp.h>

#include <Eigen/Core>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

namespace quartet::engine {
namespace {

int default_threads() {
  if (const char* env = std::getenv("QUARTET_THREADS")) {
    int n = std::atoi(env);
    if (n >= 1) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
}

int& threads();

// Eigen's GEMM takes its thread count from a static that set_compute_threads() sets; until
// then it asks OpenMP (every core). Its blocking, and so the order in which a product adds,
// depends on that count: a process whose first product ran before the engine set its
// threads, and whose later ones after, added differently, and threads of one process
// (ranks as threads) raced to set it. So the count is set as the library loads, with
// initParallel(), which Eigen asks for before any thread uses it.
const int loaded_threads = [] {
  Eigen::initParallel();
  return threads();
}();

int& threads() {
  static int n = [] {
    int d = default_threads();
    omp_set_num_threads(d);
    Eigen::setNbThreads(d);
    return d;
  }();
  return n;
}

}  // namespace

void set_compute_threads(int n) {
  if (n < 1 || n > kMaxComputeThreads)
    throw std::invalid_argument("compute threads: expected 1 to " + std::to_string(kMaxComputeThreads) + ", got " +
                                std::to_string(n));
  threads() = n;
  omp_set_num_threads(n);
  Eigen::setNbThreads(n);
}

int compute_threads() { return threads(); }

}  // namespace quartet::engine

#include "tests/transport/alloc_probe.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {

std::atomic<bool> g_probing{false};
std::atomic<size_t> g_largest{0};

void* allocate(size_t n) {
  if (g_probing.load(std::memory_order_relaxed)) {
    size_t seen = g_largest.load(std::memory_order_relaxed);
    while (n > seen && !g_largest.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}

}  // namespace

// Replaces the global operator new for this test binary; the default nothrow and
// array forms of libstdc++ forward here.
void* operator new(size_t n) { return allocate(n); }
void* operator new[](size_t n) { return allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace quartet::transport::testing {

AllocationProbe::AllocationProbe() {
  g_largest.store(0);
  g_probing.store(true);
}

AllocationProbe::~AllocationProbe() { g_probing.store(false); }

size_t AllocationProbe::largest() const { return g_largest.load(); }

}  // namespace quartet::transport::testing

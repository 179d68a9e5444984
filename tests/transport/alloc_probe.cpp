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

// Replaces the global operator new for this test binary, the nothrow forms too: libstdc++'s
// own would forward here, but AddressSanitizer's runtime brings its own, whose blocks our
// delete must not free (std::stable_sort's buffer is one).
void* operator new(size_t n) { return allocate(n); }
void* operator new[](size_t n) { return allocate(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t& tag) noexcept { return operator new(n, tag); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace quartet::transport::testing {

AllocationProbe::AllocationProbe() {
  g_largest.store(0);
  g_probing.store(true);
}

AllocationProbe::~AllocationProbe() { g_probing.store(false); }

size_t AllocationProbe::largest() const { return g_largest.load(); }

}  // namespace quartet::transport::testing

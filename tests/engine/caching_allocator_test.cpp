#include "engine/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <set>

namespace quartet::engine {
namespace {

// Host memory with a capacity, standing in for a device: counts what it hands out.
struct FakeDevice {
  size_t capacity = size_t{64} << 20;
  size_t used = 0;
  int64_t mallocs = 0, frees = 0, syncs = 0;
};

class HostMemory final : public RawMemory {
 public:
  explicit HostMemory(FakeDevice& d) : d_(d) {}
  void* allocate(size_t bytes) override {
    if (d_.used + bytes > d_.capacity) return nullptr;
    d_.used += bytes;
    d_.mallocs += 1;
    return std::malloc(bytes);
  }
  void free(void* p, size_t bytes) override {
    d_.used -= bytes;
    d_.frees += 1;
    std::free(p);
  }
  void synchronize() override { d_.syncs += 1; }
  std::pair<int64_t, int64_t> device_used_total() override {
    return {static_cast<int64_t>(d_.used), static_cast<int64_t>(d_.capacity)};
  }
  std::string name() const override { return "fake:0"; }

 private:
  FakeDevice& d_;
};

constexpr size_t kMiB = size_t{1} << 20;

TEST(CachingAllocator, SizesRoundTo512BytesBelow1MiBAndTo2MiBAbove) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(kMiB - 1), kMiB);
  EXPECT_EQ(CachingAllocator::round_size(kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::round_size(3 * kMiB), 4 * kMiB);
}

// A training step allocates and frees the same sizes every time: from the second step
// on, every buffer comes from the cache and the device is not asked again.
TEST(CachingAllocator, RepeatedStepsDrawEveryBlockFromTheCache) {
  FakeDevice d;
  CachingAllocator a(std::make_unique<HostMemory>(d));
  const std::vector<size_t> step{100, 4096, 3 * kMiB, 100, 777};
  for (int s = 0; s < 5; ++s) {
    std::vector<void*> held;
    for (size_t bytes : step) held.push_back(a.allocate(bytes, MemTag::activations));
    EXPECT_EQ(std::set<void*>(held.begin(), held.end()).size(), held.size()) << "live blocks are distinct";
    for (void* p : held) a.free(p);
  }
  EXPECT_EQ(d.mallocs, 5);
  const AllocatorStats st = a.stats();
  EXPECT_EQ(st.raw_allocations, 5);
  EXPECT_EQ(st.cache_hits, 20);
  EXPECT_EQ(st.allocated, 0);
  EXPECT_EQ(st.reserved, static_cast<int64_t>(512 + 4096 + 4 * kMiB + 512 + 1024));
  EXPECT_EQ(st.current[static_cast<size_t>(MemTag::activations)], 0);
  EXPECT_EQ(st.peak[static_cast<size_t>(MemTag::activations)], static_cast<int64_t>(100 + 4096 + 3 * kMiB + 100 + 777));
}

// A block freed after use on one stream is not handed to another, whose kernels could
// run before the first stream's last use of it.
TEST(CachingAllocator, AFreedBlockServesOnlyItsOwnStream) {
  FakeDevice d;
  CachingAllocator a(std::make_unique<HostMemory>(d));
  void* p = a.allocate(1000, MemTag::communication, 1);
  a.free(p);
  void* q = a.allocate(1000, MemTag::communication, 2);
  EXPECT_NE(q, p);
  EXPECT_EQ(d.mallocs, 2);
  void* r = a.allocate(1000, MemTag::communication, 1);
  EXPECT_EQ(r, p);
  a.free(q);
  a.free(r);
}

TEST(CachingAllocator, TagsCountRequestedBytesWithPeaksAndRetagMovesThem) {
  FakeDevice d;
  CachingAllocator a(std::make_unique<HostMemory>(d));
  void* w = a.allocate(1000, MemTag::workspace);
  void* g = a.allocate(2000, MemTag::gradients);
  a.retag(w, MemTag::gradients);
  AllocatorStats st = a.stats();
  EXPECT_EQ(st.current[static_cast<size_t>(MemTag::workspace)], 0);
  EXPECT_EQ(st.peak[static_cast<size_t>(MemTag::workspace)], 1000);
  EXPECT_EQ(st.current[static_cast<size_t>(MemTag::gradients)], 3000);
  EXPECT_EQ(st.allocated, 1024 + 2048);
  a.free(g);
  a.reset_peaks();
  st = a.stats();
  EXPECT_EQ(st.peak[static_cast<size_t>(MemTag::gradients)], 1000);
  EXPECT_EQ(st.peak[static_cast<size_t>(MemTag::workspace)], 0);
  EXPECT_EQ(st.allocated_peak, 1024);
  a.free(w);
}

// When the device is full, cached blocks go back to it (after waiting for its kernels)
// and the allocation is tried again.
TEST(CachingAllocator, AFullDeviceGetsTheCacheBackBeforeARequestFails) {
  FakeDevice d;
  d.capacity = 10 * kMiB;
  CachingAllocator a(std::make_unique<HostMemory>(d));
  void* p = a.allocate(6 * kMiB, MemTag::activations);
  a.free(p);  // 6 MiB cached
  void* q = a.allocate(8 * kMiB, MemTag::activations);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(d.syncs, 1);
  EXPECT_EQ(d.frees, 1);
  EXPECT_EQ(a.stats().cache_flushes, 1);
  EXPECT_EQ(a.stats().reserved, static_cast<int64_t>(8 * kMiB));
  a.free(q);
}

TEST(CachingAllocator, ARequestBeyondTheDeviceNamesItTheSizeAndWhatIsInUse) {
  FakeDevice d;
  d.capacity = 10 * kMiB;
  CachingAllocator a(std::make_unique<HostMemory>(d));
  void* p = a.allocate(4 * kMiB, MemTag::parameters);
  try {
    a.allocate(7 * kMiB, MemTag::activations);
    FAIL() << "expected an out-of-memory error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(),
                 "fake:0 is out of memory: asked for 7.0 MiB (activations) with 4.0 MiB in use by Quartet, 4.0 MiB "
                 "of 10.0 MiB used on the device; use a smaller batch, micro_batches or activation checkpointing");
  }
  EXPECT_EQ(a.stats().current[static_cast<size_t>(MemTag::activations)], 0);
  a.free(p);
}

TEST(CachingAllocator, FreeingAPointerItDidNotHandOutIsALogicError) {
  FakeDevice d;
  CachingAllocator a(std::make_unique<HostMemory>(d));
  int x = 0;
  EXPECT_THROW(a.free(&x), std::logic_error);
  EXPECT_THROW(a.retag(&x, MemTag::gradients), std::logic_error);
}

TEST(CachingAllocator, EmptyCacheAndTheDestructorReturnEveryCachedBlock) {
  FakeDevice d;
  {
    CachingAllocator a(std::make_unique<HostMemory>(d));
    a.free(a.allocate(100, MemTag::activations));
    a.free(a.allocate(5 * kMiB, MemTag::activations));
    a.empty_cache();
    EXPECT_EQ(d.used, 0u);
    EXPECT_EQ(a.stats().reserved, 0);
    a.free(a.allocate(100, MemTag::activations));
    EXPECT_EQ(d.used, 512u);
  }
  EXPECT_EQ(d.used, 0u);
  EXPECT_EQ(d.mallocs, d.frees);
}

}  // namespace
}  // namespace quartet::engine

#pragma once

// A caching allocator for device memory, as PyTorch's CUDA allocator works: blocks are
// rounded to size classes and, when freed, kept on a free list of the stream they were
// used on, so a training step after the first draws every buffer from the cache and
// cudaMalloc / cudaFree stay off the hot path. The bookkeeping is plain C++ over a
// RawMemory interface: cudaMalloc in the CUDA backend, host memory in the tests.
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/memory.h"

namespace quartet::engine {

// Where the allocator's blocks come from.
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  // nullptr when the device has no room for `bytes`.
  virtual void* allocate(size_t bytes) = 0;
  virtual void free(void* p, size_t bytes) = 0;
  // Waits for all work on the device, so cached blocks may go back to it.
  virtual void synchronize() {}
  // The device's memory in use (by anyone) and in all, for records; {0, 0} when unknown.
  virtual std::pair<int64_t, int64_t> device_used_total() { return {0, 0}; }
  virtual std::string name() const = 0;  // "cuda:0", for messages
};

// Opaque stream identity (a cudaStream_t cast to an integer); 0 is the default stream.
using StreamId = uintptr_t;

struct AllocatorStats {
  std::array<int64_t, kMemTagCount> current{};  // bytes asked for, by tag
  std::array<int64_t, kMemTagCount> peak{};
  int64_t allocated = 0;  // bytes of blocks handed out (rounded sizes)
  int64_t allocated_peak = 0;
  int64_t reserved = 0;   // bytes held from RawMemory: handed out plus cached
  int64_t reserved_peak = 0;
  int64_t raw_allocations = 0;  // RawMemory::allocate calls that succeeded
  int64_t cache_hits = 0;       // allocations served from a free list
  int64_t cache_flushes = 0;    // times the cache was emptied to make room
};

class CachingAllocator {
 public:
  explicit CachingAllocator(std::unique_ptr<RawMemory> raw);
  ~CachingAllocator();  // returns every cached block; blocks still out are the owners' leak
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Requests round up to 512 bytes below 1 MiB and to 2 MiB above; a freed block serves
  // later requests of its size class on the same stream only, which keeps reuse ordered
  // by that stream without events. When the device is full, the cache is emptied (after
  // a synchronize) and the allocation tried once more; then std::runtime_error names the
  // device, the request and what is in use and cached. Thread-safe.
  void* allocate(size_t bytes, MemTag tag, StreamId stream = 0);
  // `p` from allocate(); its bytes leave `tag`'s count.
  void free(void* p);
  // Moves a live block's bytes from one tag's count to another's.
  void retag(void* p, MemTag to);
  // Returns every cached block to RawMemory.
  void empty_cache();

  AllocatorStats stats() const;
  void reset_peaks();  // peaks := current
  std::pair<int64_t, int64_t> device_used_total() { return raw_->device_used_total(); }

  static size_t round_size(size_t bytes);

 private:
  struct Block {
    size_t size = 0;       // rounded
    size_t requested = 0;  // what the tag counts
    MemTag tag = MemTag::activations;
    StreamId stream = 0;
  };
  void* take_cached(size_t size, StreamId stream);
  void release_cache_locked();
  void count(MemTag tag, int64_t bytes);

  std::unique_ptr<RawMemory> raw_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> live_;
  // (stream, size class) -> cached blocks of that size.
  std::map<std::pair<StreamId, size_t>, std::vector<void*>> free_;
  AllocatorStats stats_;
};

}  // namespace quartet::engine

#include "engine/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace quartet::engine {
namespace {

constexpr size_t kSmallRound = 512;
constexpr size_t kSmallLimit = size_t{1} << 20;
constexpr size_t kLargeRound = size_t{2} << 20;

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

}  // namespace

CachingAllocator::CachingAllocator(std::unique_ptr<RawMemory> raw) : raw_(std::move(raw)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  release_cache_locked();
}

size_t CachingAllocator::round_size(size_t bytes) {
  const size_t step = bytes < kSmallLimit ? kSmallRound : kLargeRound;
  return std::max(step, (bytes + step - 1) / step * step);
}

void* CachingAllocator::take_cached(size_t size, StreamId stream) {
  auto it = free_.find({stream, size});
  if (it == free_.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  return p;
}

void CachingAllocator::release_cache_locked() {
  for (auto& [key, blocks] : free_)
    for (void* p : blocks) {
      raw_->free(p, key.second);
      stats_.reserved -= static_cast<int64_t>(key.second);
    }
  free_.clear();
}

void CachingAllocator::count(MemTag tag, int64_t bytes) {
  const auto i = static_cast<size_t>(tag);
  stats_.current[i] += bytes;
  stats_.peak[i] = std::max(stats_.peak[i], stats_.current[i]);
}

void* CachingAllocator::allocate(size_t bytes, MemTag tag, StreamId stream) {
  const size_t size = round_size(bytes);
  std::lock_guard lock(mutex_);
  void* p = take_cached(size, stream);
  if (p) {
    stats_.cache_hits += 1;
  } else {
    p = raw_->allocate(size);
    if (!p && !free_.empty()) {
      // Cached blocks of other sizes or streams go back to the device; the kernels that
      // last used them must have finished first.
      raw_->synchronize();
      release_cache_locked();
      stats_.cache_flushes += 1;
      p = raw_->allocate(size);
    }
    if (!p) {
      const auto [used, total] = raw_->device_used_total();
      throw std::runtime_error(raw_->name() + " is out of memory: asked for " + mib(static_cast<int64_t>(bytes)) +
                               " (" + std::string(mem_tag_name(tag)) + ") with " + mib(stats_.allocated) +
                               " in use by Quartet" +
                               (total > 0 ? ", " + mib(used) + " of " + mib(total) + " used on the device" : "") +
                               "; use a smaller batch, micro_batches or activation checkpointing");
    }
    stats_.raw_allocations += 1;
    stats_.reserved += static_cast<int64_t>(size);
    stats_.reserved_peak = std::max(stats_.reserved_peak, stats_.reserved);
  }
  live_[p] = Block{size, bytes, tag, stream};
  stats_.allocated += static_cast<int64_t>(size);
  stats_.allocated_peak = std::max(stats_.allocated_peak, stats_.allocated);
  count(tag, static_cast<int64_t>(bytes));
  return p;
}

void CachingAllocator::free(void* p) {
  if (!p) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(p);
  if (it == live_.end()) throw std::logic_error("CachingAllocator::free: a pointer this allocator did not hand out");
  const Block b = it->second;
  live_.erase(it);
  stats_.allocated -= static_cast<int64_t>(b.size);
  count(b.tag, -static_cast<int64_t>(b.requested));
  free_[{b.stream, b.size}].push_back(p);
}

void CachingAllocator::retag(void* p, MemTag to) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(p);
  if (it == live_.end()) throw std::logic_error("CachingAllocator::retag: a pointer this allocator did not hand out");
  Block& b = it->second;
  if (b.tag == to) return;
  // Out of the old tag first, so a peak never counts the block twice.
  count(b.tag, -static_cast<int64_t>(b.requested));
  count(to, static_cast<int64_t>(b.requested));
  b.tag = to;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  raw_->synchronize();
  release_cache_locked();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peaks() {
  std::lock_guard lock(mutex_);
  stats_.peak = stats_.current;
  stats_.allocated_peak = stats_.allocated;
  stats_.reserved_peak = stats_.reserved;
}

}  // namespace quartet::engine

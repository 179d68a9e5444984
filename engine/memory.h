#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace quartet::engine {

// What an allocation is for. Every tensor storage carries one tag.
enum class MemTag : int {
  parameters,
  gradients,
  optimizer_state,
  activations,
  communication,
  workspace,
};
inline constexpr int kMemTagCount = 6;
std::string_view mem_tag_name(MemTag tag);

struct MemStats {
  std::array<int64_t, kMemTagCount> current{};
  std::array<int64_t, kMemTagCount> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;  // peak of the sum, not the sum of peaks
  // Each tag's bytes when the total last reached its peak: they sum to total_peak (up to
  // allocations on other threads at that instant), where the tags' own peaks, reached at
  // different times, sum to more.
  std::array<int64_t, kMemTagCount> at_total_peak{};
};

// Process-wide byte counts per tag for one device kind (host memory here; the CUDA
// allocator keeps its own). Thread-safe.
MemStats memory_stats();
void reset_memory_peaks();  // peaks := current
void memory_add(MemTag tag, int64_t bytes);
void memory_sub(MemTag tag, int64_t bytes);

// The tag new tensors get on this thread; activations unless a scope says otherwise.
MemTag current_mem_tag();

class MemTagScope {
 public:
  explicit MemTagScope(MemTag tag);
  ~MemTagScope();
  MemTagScope(const MemTagScope&) = delete;
  MemTagScope& operator=(const MemTagScope&) = delete;

 private:
  MemTag saved_;
};

}  // namespace quartet::engine

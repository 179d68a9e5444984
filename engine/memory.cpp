#include "engine/memory.h"

#include <atomic>

namespace quartet::engine {
namespace {

struct Counters {
  std::array<std::atomic<int64_t>, kMemTagCount> current{};
  std::array<std::atomic<int64_t>, kMemTagCount> peak{};
  std::atomic<int64_t> total_current{0};
  std::atomic<int64_t> total_peak{0};
  std::array<std::atomic<int64_t>, kMemTagCount> at_total_peak{};
};

Counters& counters() {
  static Counters c;
  return c;
}

// True when `value` became the peak.
bool raise_peak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen)
    if (peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) return true;
  return false;
}

void snapshot_at_peak(Counters& c) {
  for (int i = 0; i < kMemTagCount; ++i)
    c.at_total_peak[i].store(c.current[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
}

thread_local MemTag t_tag = MemTag::activations;

}  // namespace

std::string_view mem_tag_name(MemTag tag) {
  switch (tag) {
    case MemTag::parameters: return "parameters";
    case MemTag::gradients: return "gradients";
    case MemTag::optimizer_state: return "optimizer_state";
    case MemTag::activations: return "activations";
    case MemTag::communication: return "communication";
    case MemTag::workspace: return "workspace";
  }
  return "unknown";
}

MemStats memory_stats() {
  Counters& c = counters();
  MemStats s;
  for (int i = 0; i < kMemTagCount; ++i) {
    s.current[i] = c.current[i].load(std::memory_order_relaxed);
    s.peak[i] = c.peak[i].load(std::memory_order_relaxed);
  }
  s.total_current = c.total_current.load(std::memory_order_relaxed);
  s.total_peak = c.total_peak.load(std::memory_order_relaxed);
  for (int i = 0; i < kMemTagCount; ++i) s.at_total_peak[i] = c.at_total_peak[i].load(std::memory_order_relaxed);
  return s;
}

void reset_memory_peaks() {
  Counters& c = counters();
  for (int i = 0; i < kMemTagCount; ++i) c.peak[i] = c.current[i].load();
  c.total_peak = c.total_current.load();
  snapshot_at_peak(c);
}

void memory_add(MemTag tag, int64_t bytes) {
  Counters& c = counters();
  const int i = static_cast<int>(tag);
  raise_peak(c.peak[i], c.current[i].fetch_add(bytes, std::memory_order_relaxed) + bytes);
  if (raise_peak(c.total_peak, c.total_current.fetch_add(bytes, std::memory_order_relaxed) + bytes))
    snapshot_at_peak(c);
}

void memory_sub(MemTag tag, int64_t bytes) {
  Counters& c = counters();
  c.current[static_cast<int>(tag)].fetch_sub(bytes, std::memory_order_relaxed);
  c.total_current.fetch_sub(bytes, std::memory_order_relaxed);
}

MemTag current_mem_tag() { return t_tag; }

MemTagScope::MemTagScope(MemTag tag) : saved_(t_tag) { t_tag = tag; }
MemTagScope::~MemTagScope() { t_tag = saved_; }

}  // namespace quartet::engine

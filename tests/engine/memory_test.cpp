#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/memory.h"
#include "engine/tensor.h"
#include "engine/threads.h"

namespace quartet::engine {
namespace {

int64_t current(MemTag t) { return memory_stats().current[static_cast<int>(t)]; }
int64_t peak(MemTag t) { return memory_stats().peak[static_cast<int>(t)]; }

TEST(Memory, TensorsAreChargedToTheirTagWhileTheyLive) {
  const int64_t before = current(MemTag::workspace);
  {
    MemTagScope scope(MemTag::workspace);
    Tensor t = Tensor::zeros({10, 10});
    EXPECT_EQ(t.mem_tag(), MemTag::workspace);
    EXPECT_EQ(current(MemTag::workspace) - before, 400);
  }
  EXPECT_EQ(current(MemTag::workspace), before);
}

TEST(Memory, PeakRemembersTheHighestPointUntilReset) {
  reset_memory_peaks();
  const int64_t base = peak(MemTag::communication);
  { Tensor t = Tensor::empty({1000}, Device::cpu(), MemTag::communication); }
  EXPECT_EQ(peak(MemTag::communication) - base, 4000);
  reset_memory_peaks();
  EXPECT_EQ(peak(MemTag::communication), current(MemTag::communication));
}

// The tags at the total's peak sum to it; the tags' own peaks, reached at different
// moments, sum to more.
TEST(Memory, TheBreakdownAtTheTotalsPeakSumsToThePeak) {
  reset_memory_peaks();
  const MemStats base = memory_stats();
  auto at_peak = [](MemTag t) { return memory_stats().at_total_peak[static_cast<int>(t)]; };
  const int p = static_cast<int>(MemTag::parameters), a = static_cast<int>(MemTag::activations),
            g = static_cast<int>(MemTag::gradients);
  Tensor params = Tensor::empty({100}, Device::cpu(), MemTag::parameters);
  { Tensor acts = Tensor::empty({50}, Device::cpu(), MemTag::activations); }
  Tensor grads = Tensor::empty({30}, Device::cpu(), MemTag::gradients);
  const MemStats s = memory_stats();
  EXPECT_EQ(s.total_peak - base.total_peak, 600);  // 400 + 200 bytes, before the gradients
  EXPECT_EQ(at_peak(MemTag::parameters) - base.current[p], 400);
  EXPECT_EQ(at_peak(MemTag::activations) - base.current[a], 200);
  EXPECT_EQ(at_peak(MemTag::gradients) - base.current[g], 0);
  EXPECT_EQ((s.peak[p] - base.peak[p]) + (s.peak[a] - base.peak[a]) + (s.peak[g] - base.peak[g]), 720);
  int64_t sum = 0;
  for (int t = 0; t < kMemTagCount; ++t) sum += s.at_total_peak[t];
  EXPECT_EQ(sum, s.total_peak);
  reset_memory_peaks();  // the breakdown restarts from what is held now
  EXPECT_EQ(at_peak(MemTag::gradients), memory_stats().current[g]);
}

TEST(Memory, DefaultTagIsActivationsAndScopesNest) {
  EXPECT_EQ(current_mem_tag(), MemTag::activations);
  {
    MemTagScope a(MemTag::parameters);
    {
      MemTagScope b(MemTag::gradients);
      EXPECT_EQ(current_mem_tag(), MemTag::gradients);
    }
    EXPECT_EQ(current_mem_tag(), MemTag::parameters);
  }
  EXPECT_EQ(current_mem_tag(), MemTag::activations);
}

TEST(Memory, DetachSharesStorageWithoutChargingTwice) {
  const int64_t before = current(MemTag::activations);
  Tensor a = Tensor::zeros({256});
  Tensor b = a.detach();
  EXPECT_EQ(current(MemTag::activations) - before, 1024);
}

TEST(Memory, FreedHostBlocksServeTheNextTensorOfTheSameSize) {
  const char* cap = std::getenv("QUARTET_HOST_CACHE_MB");
  if (cap && std::atoll(cap) == 0) GTEST_SKIP() << "the host block cache is off (QUARTET_HOST_CACHE_MB=0)";
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the host block cache is off under AddressSanitizer";
#endif
  const float* first;
  {
    Tensor t = Tensor::empty({12345});
    first = t.data();
  }
  Tensor again = Tensor::empty({12345});
  EXPECT_EQ(again.data(), first);
}

TEST(Memory, RetaggingMovesTheChargeWithoutRaisingTheTotalPeak) {
  Tensor t = Tensor::empty({1000}, Device::cpu(), MemTag::workspace);
  const int64_t workspace = current(MemTag::workspace), gradients = current(MemTag::gradients);
  reset_memory_peaks();
  const int64_t total_peak = memory_stats().total_peak;
  t.impl()->storage->set_tag(MemTag::gradients);
  EXPECT_EQ(t.mem_tag(), MemTag::gradients);
  EXPECT_EQ(current(MemTag::workspace), workspace - 4000);
  EXPECT_EQ(current(MemTag::gradients), gradients + 4000);
  EXPECT_EQ(memory_stats().total_peak, total_peak);
}

TEST(Threads, ComputeThreadsCanBeSetAndInvalidCountsAreRefused) {
  const int saved = compute_threads();
  set_compute_threads(1);
  EXPECT_EQ(compute_threads(), 1);
  EXPECT_THROW(set_compute_threads(0), std::invalid_argument);
  set_compute_threads(saved);
}

TEST(Device, ParsesCpuAndCudaAndRefusesOtherText) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_THROW(Device::parse("tpu"), std::invalid_argument);
  EXPECT_THROW(Device::parse("cuda:x"), std::invalid_argument);
}

}  // namespace
}  // namespace quartet::engine

// The regimes on a GPU against the CPU engine and against each other: one optimizer step
// of cnn and of unet3d from one safetensors file, accumulate = single on the GPU, and
// data_parallel over NCCL = single. Suites named Gpu* are labelled gpu; each test skips,
// saying why, where no GPU is at hand.

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>

#include "engine/device.h"
#include "tests/need_gpu.h"
#include "tests/trainers/trainer_test_util.h"
#include "trainers/regime.h"
#include "workloads/workload.h"

namespace quartet::trainers {
namespace {

using nlohmann::json;
using testing::max_abs_diff;

class GpuRegimes : public testing::RegimeTest {
 protected:
  GpuRegimes() : RegimeTest("gpu_regimes") {}

  void use_images(const std::string& model) {
    workloads::WorkloadConfig wc;
    wc.name = "synthetic";
    wc.model = model;
    wc.train_limit = 256;
    wc.test_limit = 64;
    use_workload(wc);
  }

  void use_volumes() {
    workloads::WorkloadConfig wc;
    wc.name = "phantom-ct-seg";
    wc.model = "unet3d";
    wc.volumes = 4;
    wc.test_volumes = 2;
    wc.volume_size = 32;
    wc.patch = 16;
    wc.seed = 2;
    use_workload(wc);
  }

  RoleContext on(const engine::Device& device, const std::string& arm, int64_t batch, int64_t steps) {
    RoleContext c = context(arm, batch, steps);
    c.device = device;
    c.config.eval_batch = 8;
    return c;
  }

  // The largest |difference| between two arms' final weights, logged.
  double diff(const std::string& a, const std::string& b) {
    const double d = max_abs_diff(final_weights(a), final_weights(b));
    std::cout << "[ measured ] " << a << " vs " << b << ": max |param diff| " << d << "\n";
    return d;
  }

  static inline const engine::Device kGpu = engine::Device::cuda(0);
};

// Summation orders differ (cuDNN and cuBLAS against im2col + Eigen): one SGD step of
// weights of magnitude ~0.05 agrees to ~1e-6; 1e-4 leaves room and still fails on a
// wrong kernel, which moves weights by the step itself (~1e-3).
constexpr double kOneStep = 1e-4;

TEST_F(GpuRegimes, OneCnnStepOnTheGpuMatchesTheCpu) {
  QUARTET_NEED_GPU(1);
  use_images("cnn");
  testing::run_role("single", on(engine::Device::cpu(), "cpu", 32, 1));
  testing::run_role("single", on(kGpu, "gpu", 32, 1));
  EXPECT_LT(diff("cpu", "gpu"), kOneStep);
  EXPECT_GT(max_abs_diff(final_weights("cpu"), engine::load_safetensors(init_.string())), 1e-4);
}

TEST_F(GpuRegimes, OneUnet3dStepOnTheGpuMatchesTheCpu) {
  QUARTET_NEED_GPU(1);
  use_volumes();
  testing::run_role("single", on(engine::Device::cpu(), "cpu", 2, 1));
  testing::run_role("single", on(kGpu, "gpu", 2, 1));
  EXPECT_LT(diff("cpu", "gpu"), kOneStep);
}

// The seeds' claim on one GPU: micro-batches accumulated compute the big batch's update.
TEST_F(GpuRegimes, AccumulateEqualsSingleOnTheGpu) {
  QUARTET_NEED_GPU(1);
  use_images("cnn");
  testing::run_role("single", on(kGpu, "single", 64, 4));
  testing::run_role("accumulate", on(kGpu, "accumulate", 64, 4), {{"micro_batches", 4}});
  EXPECT_LT(diff("single", "accumulate"), 2e-5);
}

// Ranks over NCCL (one rank a GPU; one rank where there is one GPU, which still runs
// the communicator, the bucketed all-reduce and the stream ordering).
TEST_F(GpuRegimes, DataParallelOverNcclEqualsSingle) {
  QUARTET_NEED_GPU(1);
  use_images("cnn");
  const int ranks = std::min(2, engine::cuda_device_count());
  testing::run_role("single", on(kGpu, "single", 64, 4));
  RoleContext c = on(kGpu, "nccl", 64, 4);
  c.settings = testing::regime_settings("data_parallel", c, {{"ranks", ranks}, {"backend", "nccl"}, {"bucket_mb", 0.1}});
  testing::run_roles_as_threads("data_parallel", c);
  EXPECT_LT(diff("single", "nccl"), 2e-5);
  EXPECT_EQ(records("nccl", "rank0").back()["comm"]["backend"], "nccl");
}

// Step records of a GPU arm carry the device's memory: by tag, the allocator's reserve,
// the device's used and total.
TEST_F(GpuRegimes, StepRecordsCarryTheGpusMemory) {
  QUARTET_NEED_GPU(1);
  use_images("cnn");
  testing::run_role("single", on(kGpu, "gpu", 32, 2));
  for (const json& r : records("gpu", "trainer")) {
    ASSERT_TRUE(r.contains("gpu_memory")) << r.dump();
    const json& g = r["gpu_memory"];
    EXPECT_GT(g["parameters"]["current"].get<int64_t>(), 0);
    EXPECT_GT(g["activations"]["peak"].get<int64_t>(), 0);
    EXPECT_GE(g["reserved"].get<int64_t>(), g["allocated"].get<int64_t>());
    EXPECT_GT(g["device_total"].get<int64_t>(), g["device_used"].get<int64_t>());
    EXPECT_EQ(g["device"], "cuda:0");
  }
}

}  // namespace
}  // namespace quartet::trainers

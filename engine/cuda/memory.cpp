#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <vector>

#include "engine/cuda/backend.h"
#include "engine/cuda/runtime.h"

namespace quartet::engine::cuda {
namespace {

// Device memory straight from the driver; only the caching allocator calls it.
class CudaMemory final : public RawMemory {
 public:
  explicit CudaMemory(int index) : index_(index) {}
  void* allocate(size_t bytes) override {
    QUARTET_CUDA_CHECK(cudaSetDevice(index_));
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: running out is answered by the allocator
      return nullptr;
    }
    check(status, "cudaMalloc");
    return p;
  }
  void free(void* p, size_t) override {
    QUARTET_CUDA_CHECK(cudaSetDevice(index_));
    QUARTET_CUDA_CHECK(cudaFree(p));
  }
  void synchronize() override {
    QUARTET_CUDA_CHECK(cudaSetDevice(index_));
    QUARTET_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::pair<int64_t, int64_t> device_used_total() override {
    size_t free_bytes = 0, total = 0;
    if (cudaSetDevice(index_) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return {0, 0};
    return {static_cast<int64_t>(total - free_bytes), static_cast<int64_t>(total)};
  }
  std::string name() const override { return "cuda:" + std::to_string(index_); }

 private:
  int index_;
};

struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    const cudaError_t status = cudaGetDeviceCount(&r.count);
    if (status != cudaSuccess) {
      r.count = 0;
      r.reason = std::string(cudaGetErrorString(status)) + " (" + cudaGetErrorName(status) + ")";
      (void)cudaGetLastError();
    } else if (r.count == 0) {
      r.reason = "the CUDA runtime sees no device";
    }
    return r;
  }();
  return p;
}

struct Allocators {
  std::mutex mutex;
  std::vector<std::unique_ptr<CachingAllocator>> by_index;
};

Allocators& allocators() {
  // Never destroyed: storages freed during static destruction still find their allocator.
  static auto* a = new Allocators;
  return *a;
}

}  // namespace

int device_count() { return probe().count; }
std::string no_device_reason() { return probe().reason; }

CachingAllocator& allocator(int index) {
  Allocators& a = allocators();
  std::lock_guard lock(a.mutex);
  const auto i = static_cast<size_t>(index);
  if (a.by_index.size() <= i) a.by_index.resize(i + 1);
  if (!a.by_index[i]) a.by_index[i] = std::make_unique<CachingAllocator>(std::make_unique<CudaMemory>(index));
  return *a.by_index[i];
}

StreamId compute_stream(int index) {
  return reinterpret_cast<StreamId>(context(Device::cuda(index)).compute);
}

}  // namespace quartet::engine::cuda

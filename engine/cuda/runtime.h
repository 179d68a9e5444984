#pragma once

// What every CUDA kernel file shares: error checks that throw with the failing call
// named, the device's compute stream and its cuBLAS and cuDNN handles, launch sizes, and
// scratch memory drawn from the engine's caching allocator. Host C++; included by the .cu
// files of engine/cuda/ and by the host code that drives them.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>

#include "engine/device.h"
#include "engine/tensor.h"

namespace quartet::engine::cuda {

// Throw std::runtime_error naming `what` (the call's text) and the library's message.
void check(cudaError_t status, const char* what);
void check(cublasStatus_t status, const char* what);
void check(cudnnStatus_t status, const char* what);

#define QUARTET_CUDA_CHECK(call) ::quartet::engine::cuda::check((call), #call)
// After a kernel launch: a bad launch configuration is reported here, not later.
#define QUARTET_CUDA_LAUNCHED(name) ::quartet::engine::cuda::check(cudaGetLastError(), name)

// One device's execution state in this process, made on first use: its compute stream
// (every engine kernel of that device runs on it, in order), a communication stream for
// collectives, and cuBLAS and cuDNN handles bound to the compute stream.
struct DeviceContext {
  int index = 0;
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;
  cublasHandle_t cublas = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cudaDeviceProp props{};
};

// The context of `device` (a cuda device), with that device made current on this thread.
DeviceContext& context(const Device& device);
// The context of the device a tensor lives on.
inline DeviceContext& context_of(const Tensor& t) { return context(t.device()); }
// Its compute stream.
inline cudaStream_t stream_of(const Tensor& t) { return context_of(t).compute; }

// Waits until every kernel queued on the device's streams has finished.
void synchronize(const Device& device);

// Math modes from the spec's precision switch: TF32 tensor cores for fp32 GEMMs and
// convolutions (off by default: exact fp32).
void set_allow_tf32(bool allow);
bool allow_tf32();

// Launch geometry for one thread per element: 256 threads a block, and enough blocks
// for n elements, capped; kernels loop with a grid stride so the cap is safe.
inline constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

// Scratch device memory from the caching allocator, charged to the workspace tag and
// returned to the cache when this goes (the stream order keeps reuse safe).
class Workspace {
 public:
  Workspace(const Device& device, size_t bytes);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  Tensor buffer_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Copies host values to device memory (and back) on the device's compute stream, waiting
// for the copy: small inputs of kernels (targets, class weights, masks) and results.
void upload(const Device& device, const void* host, void* device_ptr, size_t bytes);
void download(const Device& device, const void* device_ptr, void* host, size_t bytes);

}  // namespace quartet::engine::cuda

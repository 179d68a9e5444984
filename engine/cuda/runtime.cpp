#include "engine/cuda/runtime.h"

#include "engine/cuda/cublas_loader.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace quartet::engine::cuda {
namespace {

std::atomic<bool> g_allow_tf32{false};

struct Contexts {
  std::mutex mutex;
  std::vector<std::unique_ptr<DeviceContext>> by_index;
};

Contexts& contexts() {
  static Contexts c;
  return c;
}

std::unique_ptr<DeviceContext> make_context(int index) {
  auto c = std::make_unique<DeviceContext>();
  c->index = index;
  QUARTET_CUDA_CHECK(cudaSetDevice(index));
  QUARTET_CUDA_CHECK(cudaGetDeviceProperties(&c->props, index));
  QUARTET_CUDA_CHECK(cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking));
  QUARTET_CUDA_CHECK(cudaStreamCreateWithFlags(&c->comm, cudaStreamNonBlocking));
  QUARTET_CUDA_CHECK(cublas().create(&c->cublas));
  QUARTET_CUDA_CHECK(cublas().set_stream(c->cublas, c->compute));
  QUARTET_CUDA_CHECK(cudnnCreate(&c->cudnn));
  QUARTET_CUDA_CHECK(cudnnSetStream(c->cudnn, c->compute));
  return c;
}

}  // namespace

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("CUDA: ") + what + " failed: " + cudaGetErrorName(status) + " (" +
                             cudaGetErrorString(status) + ")");
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS: ") + what + " failed: " + cublas().status_name(status) + " (" +
                             cublas().status_string(status) + ")");
}

void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuDNN: ") + what + " failed: " + cudnnGetErrorString(status));
}

DeviceContext& context(const Device& device) {
  if (device.is_cpu()) throw std::logic_error("cuda::context: a cpu tensor reached the CUDA backend");
  Contexts& all = contexts();
  DeviceContext* c = nullptr;
  {
    std::lock_guard lock(all.mutex);
    const auto i = static_cast<size_t>(device.index);
    if (all.by_index.size() <= i) all.by_index.resize(i + 1);
    if (!all.by_index[i]) all.by_index[i] = make_context(device.index);
    c = all.by_index[i].get();
  }
  // Each thread has its own current device; kernels launch on the current one.
  int current = -1;
  QUARTET_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device.index) QUARTET_CUDA_CHECK(cudaSetDevice(device.index));
  return *c;
}

void synchronize(const Device& device) {
  DeviceContext& c = context(device);
  QUARTET_CUDA_CHECK(cudaStreamSynchronize(c.compute));
  QUARTET_CUDA_CHECK(cudaStreamSynchronize(c.comm));
}

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }

Workspace::Workspace(const Device& device, size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  buffer_ = Tensor::empty({static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float))}, device,
                          MemTag::workspace);
  data_ = buffer_.device_data();
}

Workspace::~Workspace() = default;

void upload(const Device& device, const void* host, void* device_ptr, size_t bytes) {
  if (bytes == 0) return;
  DeviceContext& c = context(device);
  QUARTET_CUDA_CHECK(cudaMemcpyAsync(device_ptr, host, bytes, cudaMemcpyHostToDevice, c.compute));
  // The host buffer may go as soon as this returns.
  QUARTET_CUDA_CHECK(cudaStreamSynchronize(c.compute));
}

void download(const Device& device, const void* device_ptr, void* host, size_t bytes) {
  if (bytes == 0) return;
  DeviceContext& c = context(device);
  QUARTET_CUDA_CHECK(cudaMemcpyAsync(host, device_ptr, bytes, cudaMemcpyDeviceToHost, c.compute));
  QUARTET_CUDA_CHECK(cudaStreamSynchronize(c.compute));
}

}  // namespace quartet::engine::cuda

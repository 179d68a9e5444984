#pragma once

// Collectives on GPUs over NCCL. Buffers are device memory of the communicator's GPU;
// each operation runs on the communicator's own stream and returns (or completes its
// Work) once the stream has finished it. Bootstraps through a rendezvous store: rank 0
// publishes the NCCL unique id, the others read it (the coordinator's store for
// processes).
//
// This header needs neither CUDA nor NCCL headers; the target quartet_transport_nccl
// exists only when the CUDA toolkit and libnccl were found (QUARTET_WITH_NCCL).

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "transport/collectives.h"

namespace gloo::rendezvous {
class Store;
}

namespace quartet::transport {

struct NcclOptions {
  int device = -1;  // CUDA device of this rank; -1: rank % the number of devices
  std::string key = "nccl/unique_id";  // store key of the unique id
  std::chrono::milliseconds timeout = std::chrono::minutes(5);  // waiting for the id
};

// "" when at least one GPU can be used; otherwise why not ("cudaGetDeviceCount:
// no CUDA-capable device is detected (error 100)", "no CUDA device").
std::string nccl_unavailable_reason();

// Joins rank `rank` of `size` into one NCCL communicator. Throws std::runtime_error with
// the CUDA or NCCL error (file:line) when there is no usable GPU or NCCL fails.
std::unique_ptr<Collectives> make_nccl_collectives(gloo::rendezvous::Store& store, int rank, int size,
                                                   const NcclOptions& options = {});

// Device memory for benchmarks and tests (layers above transport keep no CUDA headers).
class DeviceBuffer {
 public:
  // device -1: the calling thread's current device (the one make_nccl_collectives chose).
  DeviceBuffer(int device, size_t floats);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::span<float> span() { return {data_, size_}; }  // device pointers: never dereference
  void upload(std::span<const float> host);
  void download(std::span<float> host) const;

 private:
  int device_;
  float* data_ = nullptr;
  size_t size_;
};

}  // namespace quartet::transport

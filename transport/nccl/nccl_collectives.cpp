#include "transport/nccl/nccl_collectives.h"

#include <cuda_runtime.h>
#include <gloo/rendezvous/store.h>
#include <nccl.h>

#include <cstring>
#include <stdexcept>
#include <vector>

namespace quartet::transport {
namespace {

// One check at every CUDA and NCCL boundary: the call, where, and the library's words.
#define QUARTET_CUDA_CHECK(call)                                                                                  \
  do {                                                                                                            \
    const cudaError_t e_ = (call);                                                                                \
    if (e_ != cudaSuccess)                                                                                        \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #call ": " +         \
                               cudaGetErrorString(e_) + " (error " + std::to_string(static_cast<int>(e_)) + ")"); \
  } while (0)

#define QUARTET_NCCL_CHECK(call)                                                                          \
  do {                                                                                                    \
    const ncclResult_t r_ = (call);                                                                       \
    if (r_ != ncclSuccess)                                                                                \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #call ": " + \
                               ncclGetErrorString(r_) + " (" + std::to_string(static_cast<int>(r_)) + ")"); \
  } while (0)

class NcclCollectives final : public Collectives {
 public:
  NcclCollectives(gloo::rendezvous::Store& store, int rank, int size, const NcclOptions& options)
      : rank_(rank), size_(size) {
    if (size < 1 || rank < 0 || rank >= size)
      throw std::invalid_argument("nccl: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                  " is not a valid rank");
    if (const std::string why = nccl_unavailable_reason(); !why.empty())
      throw std::runtime_error("nccl: no usable GPU: " + why);
    int devices = 0;
    QUARTET_CUDA_CHECK(cudaGetDeviceCount(&devices));
    device_ = options.device >= 0 ? options.device : rank % devices;
    if (device_ >= devices)
      throw std::invalid_argument("nccl: device " + std::to_string(device_) + " requested, " +
                                  std::to_string(devices) + " present");
    QUARTET_CUDA_CHECK(cudaSetDevice(device_));

    ncclUniqueId id;
    if (rank == 0) {
      QUARTET_NCCL_CHECK(ncclGetUniqueId(&id));
      store.set(options.key, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
    } else {
      store.wait({options.key}, options.timeout);
      const std::vector<char> bytes = store.get(options.key);
      if (bytes.size() != sizeof(id.internal))
        throw std::runtime_error("nccl: the unique id under \"" + options.key + "\" has " +
                                 std::to_string(bytes.size()) + " bytes, expected " +
                                 std::to_string(sizeof(id.internal)));
      std::memcpy(id.internal, bytes.data(), bytes.size());
    }
    try {
      QUARTET_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      QUARTET_CUDA_CHECK(cudaMalloc(&scratch_, sizeof(float)));
      QUARTET_NCCL_CHECK(ncclCommInitRank(&comm_, size, id, rank));
    } catch (...) {
      release();
      throw;
    }
  }

  ~NcclCollectives() override {
    stop_worker();
    release();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }

 protected:
  void run_all_reduce(std::span<float> data, ReduceOp op) override {
    QUARTET_CUDA_CHECK(cudaSetDevice(device_));
    QUARTET_NCCL_CHECK(ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, nccl_op(op), comm_, stream_));
    finish();
  }

  void run_reduce_scatter(std::span<float> data, ReduceOp op) override {
    QUARTET_CUDA_CHECK(cudaSetDevice(device_));
    const size_t k = data.size() / static_cast<size_t>(size_);
    // In place as NCCL defines it: the result lands at data + rank * k.
    QUARTET_NCCL_CHECK(ncclReduceScatter(data.data(), data.data() + static_cast<size_t>(rank_) * k, k, ncclFloat,
                                         nccl_op(op), comm_, stream_));
    finish();
  }

  void run_all_gather(std::span<const float> input, std::span<float> output) override {
    QUARTET_CUDA_CHECK(cudaSetDevice(device_));
    QUARTET_NCCL_CHECK(ncclAllGather(input.data(), output.data(), input.size(), ncclFloat, comm_, stream_));
    finish();
  }

  void run_broadcast(std::span<float> data, int root) override {
    QUARTET_CUDA_CHECK(cudaSetDevice(device_));
    QUARTET_NCCL_CHECK(ncclBroadcast(data.data(), data.data(), data.size(), ncclFloat, root, comm_, stream_));
    finish();
  }

  // ncclSend and ncclRecv in one group, so neither waits for the other to be posted.
  void run_send_recv(std::span<const float> input, int to, std::span<float> output, int from) override {
    QUARTET_CUDA_CHECK(cudaSetDevice(device_));
    if (to == rank_) {
      QUARTET_CUDA_CHECK(
          cudaMemcpyAsync(output.data(), input.data(), input.size_bytes(), cudaMemcpyDeviceToDevice, stream_));
    } else {
      QUARTET_NCCL_CHECK(ncclGroupStart());
      QUARTET_NCCL_CHECK(ncclSend(input.data(), input.size(), ncclFloat, to, comm_, stream_));
      QUARTET_NCCL_CHECK(ncclRecv(output.data(), output.size(), ncclFloat, from, comm_, stream_));
      QUARTET_NCCL_CHECK(ncclGroupEnd());
    }
    finish();
  }

  // One grouped send and receive per peer (and to itself), as NCCL's own alltoall is
  // built; empty chunks post nothing.
  void run_all_to_all(std::span<const float> input, const std::vector<int64_t>& send, std::span<float> output,
                      const std::vector<int64_t>& recv) override {
    QUARTET_CUDA_CHECK(cudaSetDevice(device_));
    size_t in_at = 0, out_at = 0;
    QUARTET_NCCL_CHECK(ncclGroupStart());
    try {
      for (int p = 0; p < size_; ++p) {
        const size_t s = static_cast<size_t>(send[static_cast<size_t>(p)]);
        const size_t r = static_cast<size_t>(recv[static_cast<size_t>(p)]);
        if (s > 0) QUARTET_NCCL_CHECK(ncclSend(input.data() + in_at, s, ncclFloat, p, comm_, stream_));
        if (r > 0) QUARTET_NCCL_CHECK(ncclRecv(output.data() + out_at, r, ncclFloat, p, comm_, stream_));
        in_at += s;
        out_at += r;
      }
    } catch (...) {
      ncclGroupEnd();
      throw;
    }
    QUARTET_NCCL_CHECK(ncclGroupEnd());
    finish();
  }

  void run_barrier() override {
    // NCCL has no barrier: a one-float all-reduce, waited for, is one.
    QUARTET_CUDA_CHECK(cudaSetDevice(device_));
    QUARTET_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm_, stream_));
    finish();
  }

 private:
  static ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::average ? ncclAvg : ncclSum; }

  void finish() { QUARTET_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  void release() noexcept {
    cudaSetDevice(device_);
    if (comm_) ncclCommDestroy(comm_);
    if (scratch_) cudaFree(scratch_);
    if (stream_) cudaStreamDestroy(stream_);
    comm_ = nullptr;
    scratch_ = nullptr;
    stream_ = nullptr;
  }

  int rank_;
  int size_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  float* scratch_ = nullptr;
};

}  // namespace

std::string nccl_unavailable_reason() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess)
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e) + " (error " +
           std::to_string(static_cast<int>(e)) + ")";
  if (devices == 0) return "no CUDA device";
  return "";
}

std::unique_ptr<Collectives> make_nccl_collectives(gloo::rendezvous::Store& store, int rank, int size,
                                                   const NcclOptions& options) {
  return std::make_unique<NcclCollectives>(store, rank, size, options);
}

DeviceBuffer::DeviceBuffer(int device, size_t floats) : device_(device), size_(floats) {
  if (device_ < 0) QUARTET_CUDA_CHECK(cudaGetDevice(&device_));
  QUARTET_CUDA_CHECK(cudaSetDevice(device_));
  QUARTET_CUDA_CHECK(cudaMalloc(&data_, floats * sizeof(float)));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) {
    cudaSetDevice(device_);
    cudaFree(data_);
  }
}

void DeviceBuffer::upload(std::span<const float> host) {
  if (host.size() != size_) throw std::invalid_argument("DeviceBuffer::upload: size mismatch");
  QUARTET_CUDA_CHECK(cudaSetDevice(device_));
  QUARTET_CUDA_CHECK(cudaMemcpy(data_, host.data(), host.size_bytes(), cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(std::span<float> host) const {
  if (host.size() != size_) throw std::invalid_argument("DeviceBuffer::download: size mismatch");
  QUARTET_CUDA_CHECK(cudaSetDevice(device_));
  QUARTET_CUDA_CHECK(cudaMemcpy(host.data(), data_, host.size_bytes(), cudaMemcpyDeviceToHost));
}

}  // namespace quartet::transport

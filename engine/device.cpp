#include "engine/device.h"

#include <charconv>
#include <stdexcept>
#include <tuple>

#include "engine/device_memory.h"

#if defined(QUARTET_WITH_CUDA)
#include "engine/cuda/backend.h"
#include "engine/cuda/runtime.h"
#endif

namespace quartet::engine {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && ptr == digits.data() + digits.size() && index >= 0) return cuda(index);
  }
  throw std::invalid_argument("device: expected \"cpu\", \"cuda\" or \"cuda:N\", got \"" +
                              std::string(text) + "\"");
}

bool cuda_backend_built() {
#if defined(QUARTET_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#if defined(QUARTET_WITH_CUDA)
  return cuda::device_count();
#else
  return 0;
#endif
}

bool device_available(const Device& device) {
  return device.is_cpu() || device.index < cuda_device_count();
}

std::string device_unavailable_reason(const Device& device) {
  if (device_available(device)) return "";
  if (!cuda_backend_built())
    return "device " + device.str() +
           " is not available: this build of Quartet has no CUDA backend (build it with nvcc, cuBLAS and cuDNN "
           "installed, or -DQUARTET_CUDA=ON to insist; or use device \"cpu\")";
#if defined(QUARTET_WITH_CUDA)
  const int count = cuda::device_count();
  if (count == 0) return "device " + device.str() + " is not available: no CUDA device here: " + cuda::no_device_reason();
  return "device " + device.str() + " is not available: this machine has " + std::to_string(count) +
         " CUDA device" + (count == 1 ? " (cuda:0)" : "s (cuda:0 to cuda:" + std::to_string(count - 1) + ")");
#else
  return "";
#endif
}

void set_allow_tf32(bool allow) {
#if defined(QUARTET_WITH_CUDA)
  cuda::set_allow_tf32(allow);
#else
  (void)allow;
#endif
}

void device_synchronize(const Device& device) {
  if (device.is_cpu()) return;
#if defined(QUARTET_WITH_CUDA)
  if (!device_available(device)) throw_no_backend(device, "synchronize");
  cuda::synchronize(device);
#else
  throw_no_backend(device, "synchronize");
#endif
}

void throw_no_backend(const Device& device, const char* op) {
  throw std::runtime_error(std::string(op) + ": " + device_unavailable_reason(device));
}

namespace {

// The allocator of a device this build and machine have; else throws the reason.
CachingAllocator& allocator_of(const Device& device, const char* op) {
#if defined(QUARTET_WITH_CUDA)
  if (!device.is_cpu() && device_available(device)) return cuda::allocator(device.index);
#endif
  throw_no_backend(device, op);
}

}  // namespace

void* device_allocate(const Device& device, size_t bytes, MemTag tag) {
  CachingAllocator& a = allocator_of(device, "allocate");
#if defined(QUARTET_WITH_CUDA)
  return a.allocate(bytes, tag, cuda::compute_stream(device.index));
#else
  return a.allocate(bytes, tag);
#endif
}

void device_free(const Device& device, void* p) { allocator_of(device, "free").free(p); }

void device_retag(const Device& device, void* p, MemTag tag) { allocator_of(device, "retag").retag(p, tag); }

DeviceMemStats device_memory_stats(const Device& device) {
  CachingAllocator& a = allocator_of(device, "memory_stats");
  DeviceMemStats s;
  s.allocator = a.stats();
  std::tie(s.device_used, s.device_total) = a.device_used_total();
  return s;
}

void reset_device_memory_peaks(const Device& device) { allocator_of(device, "reset_memory_peaks").reset_peaks(); }

}  // namespace quartet::engine

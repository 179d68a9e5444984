#pragma once

#include <string>
#include <string_view>

namespace quartet::engine {

enum class DeviceType { cpu, cuda };

// Where a tensor's storage lives: the host, or CUDA device `index`.
struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int i) { return {DeviceType::cuda, i}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool operator==(const Device&) const = default;
  std::string str() const;

  // Parses "cpu", "cuda" or "cuda:N"; throws std::invalid_argument naming the text.
  static Device parse(std::string_view text);
};

// True when this build has a backend for `device` and the machine has that device.
bool device_available(const Device& device);
// Why `device` is not available (this build, the driver, or the device count), as one
// sentence naming the device; "" when it is.
std::string device_unavailable_reason(const Device& device);
// Whether this build has the CUDA backend, and how many CUDA devices it sees (0 without).
bool cuda_backend_built();
int cuda_device_count();

// Lets GPU matrix products and convolutions use TF32 tensor cores (process-wide; off by
// default). Nothing changes on the cpu.
void set_allow_tf32(bool allow);

// Waits until the kernels queued on `device` have finished; nothing to wait for on the
// cpu, whose kernels finish before they return.
void device_synchronize(const Device& device);

// Throws std::runtime_error explaining why `device` cannot run `op` here.
[[noreturn]] void throw_no_backend(const Device& device, const char* op);

}  // namespace quartet::engine

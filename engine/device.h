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

// Throws std::runtime_error explaining why `device` cannot run `op` here.
[[noreturn]] void throw_no_backend(const Device& device, const char* op);

}  // namespace quartet::engine

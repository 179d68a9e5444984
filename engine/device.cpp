#include "engine/device.h"

#include <charconv>
#include <stdexcept>

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

bool device_available(const Device& device) { return device.is_cpu(); }

void throw_no_backend(const Device& device, const char* op) {
  throw std::runtime_error(std::string(op) + ": device " + device.str() +
                           " is not available: this build of Quartet has no CUDA backend "
                           "(use device \"cpu\")");
}

}  // namespace quartet::engine

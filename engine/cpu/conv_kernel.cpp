#include "engine/cpu/conv_kernel.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "engine/cpu/winograd.h"

namespace quartet::engine::cpu {

ConvKernel conv_kernel_for(const Tensor& x, const Tensor& weight, const ConvOptions& opt) {
  const char* env = std::getenv("QUARTET_CONV_KERNEL");
  const std::string choice = env ? env : "auto";
  if (choice == "im2col") return ConvKernel::im2col;
  if (choice == "winograd")
    return winograd_supports(x, weight, opt) ? ConvKernel::winograd : ConvKernel::im2col;
  if (choice != "auto" && !choice.empty())
    throw std::invalid_argument("QUARTET_CONV_KERNEL: expected im2col, winograd or auto, got \"" + choice + "\"");
  return winograd_applies(x, weight, opt) ? ConvKernel::winograd : ConvKernel::im2col;
}

const char* conv_kernel_name(ConvKernel k) {
  switch (k) {
    case ConvKernel::im2col: return "im2col";
    case ConvKernel::winograd: return "winograd";
  }
  return "unknown";
}

}  // namespace quartet::engine::cpu

#pragma once

// Which CPU kernel computes a convolution: im2col + GEMM (engine/cpu/conv.cpp), Winograd
// (engine/cpu/winograd.h) or oneDNN's (engine/cpu/dnnl_conv.h, where the build has it).
//
// QUARTET_CONV_KERNEL chooses how:
//   auto (default)  fixed rules, so every process (every rank) picks the same kernel and
//                   regimes stay bit-for-bit equal: Winograd where winograd_applies, else
//                   im2col;
//   measure         as cuDNN's benchmark mode: the first conv of each shape times every
//                   kernel that can run it (forward: one untimed run, then the faster of
//                   two timed ones), and that shape keeps the fastest for the rest of
//                   the process. Ranks
//                   may then choose differently and agree only within the kernels'
//                   tolerances (docs/engine.md);
//   im2col, winograd, onednn   that kernel where it can run the conv, im2col elsewhere
//                   (for tests and benchmarks).
// A bad value: std::invalid_argument naming the variable and the allowed values.

#include <functional>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/tensor.h"

namespace quartet::engine::cpu {

enum class ConvKernel { im2col, winograd, onednn };

const char* conv_kernel_name(ConvKernel k);

// The policy QUARTET_CONV_KERNEL names ("auto" when unset); throws on a bad value.
std::string conv_kernel_policy();

// Whether kernel k can compute this conv (and its gradients).
bool conv_kernel_supports(ConvKernel k, const Tensor& x, const Tensor& weight, const ConvOptions& opt);

// The kernel a conv of this shape uses, forward and backward alike. Under "measure",
// the first call for a shape calls run_forward(k) for each kernel k that supports it
// (run_forward computes the conv's forward with kernel k into scratch) and times it.
ConvKernel conv_kernel_for(const Tensor& x, const Tensor& weight, const ConvOptions& opt,
                           const std::function<void(ConvKernel)>& run_forward = {});

// What "measure" chose so far, one entry per shape, in the order first seen.
struct MeasuredConv {
  std::string shape;  // "x (2, 16, 32, 32, 32) w (32, 16, 3, 3, 3) stride 1 pad 1 dil 1, 1 thread"
  std::string kernel;
  std::vector<std::pair<std::string, double>> seconds;  // each candidate's faster forward
};
std::vector<MeasuredConv> measured_conv_kernels();

}  // namespace quartet::engine::cpu

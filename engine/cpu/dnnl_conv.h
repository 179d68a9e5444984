#pragma once

// oneDNN's convolutions (its CPU engine) with conv_forward's and conv_backward's contract
// (engine/cpu/conv.h), 1 to 3 spatial dims, fp32, to be measured beside ours
// (bench/kernel_bench.cpp). Built with QUARTET_DNNL only; without it dnnl_available() is
// false and the kernels throw std::logic_error.
//
// Primitives are created once per shape, options, layout and thread count and kept.
// oneDNN runs on the same OpenMP runtime as the engine, with compute_threads() threads.
// ensures: for a fixed shape and thread count, results are bitwise equal run to run.
// Calls are serialised (one lock), so concurrent callers wait for each other.

#include <cstddef>
#include <string>

#include "engine/ops.h"
#include "engine/tensor.h"

namespace quartet::engine::cpu {

// plain: oneDNN computes on the engine's NCHW / NCDHW and OIHW / OIDHW tensors directly
// (its im2col + GEMM kernels). blocked: oneDNN picks its own layouts (such as nChw16c) for
// its JIT direct kernels and each call reorders into them and back; the faster of the two
// on every measured shape but a few single-channel ones (docs/engine.md).
enum class DnnlLayout { plain, blocked };

bool dnnl_available();
// One line for a run's environment record, e.g. "oneDNN 2.6.3 (OpenMP, avx512_core)",
// or "oneDNN: not built" without QUARTET_DNNL.
std::string dnnl_version();
// Primitives held in the cache (0 without QUARTET_DNNL).
size_t dnnl_cached_primitives();

void dnnl_conv_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt,
                       Tensor& out, DnnlLayout layout = DnnlLayout::blocked);

void dnnl_conv_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_out, const ConvOptions& opt,
                        Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias,
                        DnnlLayout layout = DnnlLayout::blocked);

}  // namespace quartet::engine::cpu

#pragma once

// Which CPU kernel computes a convolution: im2col + GEMM (engine/cpu/conv.cpp), Winograd
// (engine/cpu/winograd.h) or oneDNN's (engine/cpu/dnnl_conv.h, where the build has it).
//
// QUARTET_CONV_KERNEL chooses how:
//   auto (default)  the fastest kernel for the conv's shape and compute threads as measured
//                   on this machine, from the per-machine table (kernel_cache.h): the first
//                   process to meet a shape measures it (forward and backward of every
//                   kernel that can run it) and writes the table; every other process
//                   reads it, so every rank picks the same kernel and regimes stay bit
//                   for bit equal. `quartet tune SPEC` fills the table ahead of a run;
//   rule            fixed rules: Winograd where winograd_applies, else im2col;
//   measure         as auto, but each process measures for itself and keeps its choices
//                   to itself (cuDNN's benchmark mode): ranks may then choose differently
//                   and agree only within the kernels' tolerances (docs/engine.md);
//   im2col, winograd, onednn   that kernel where it can run the conv, im2col elsewhere
//                   (for tests and benchmarks).
// A bad value: std::invalid_argument naming the variable and the allowed values.

#include <functional>
#include <string>
#include <vector>

#include "engine/cpu/kernel_cache.h"
#include "engine/ops.h"
#include "engine/tensor.h"

namespace quartet::engine::cpu {

enum class ConvKernel { im2col, winograd, onednn };

const char* conv_kernel_name(ConvKernel k);

// The policy QUARTET_CONV_KERNEL names ("auto" when unset); throws on a bad value.
std::string conv_kernel_policy();

// Whether kernel k can compute this conv (and its gradients).
bool conv_kernel_supports(ConvKernel k, const Tensor& x, const Tensor& weight, const ConvOptions& opt);

// The kernel a conv of this shape uses, forward and backward alike. Under "auto" and
// "measure", a shape not yet chosen calls time(k) for each kernel k that supports it
// (time runs the conv's forward and backward with kernel k on scratch and returns the
// seconds); without `time` (a backward whose forward never ran here) the fixed rule.
ConvKernel conv_kernel_for(const Tensor& x, const Tensor& weight, const ConvOptions& opt,
                           const std::function<double(ConvKernel)>& time = {});

// What this process chose so far by measurement or from the table, one entry per shape,
// in the order first seen (kernel_cache.h's KernelChoice; source "cache", "measured", or
// under "measure" "measured here").
std::vector<KernelChoice> conv_kernel_choices();

}  // namespace quartet::engine::cpu

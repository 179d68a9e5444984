#pragma once

// Winograd convolution, F(2x2, 3x3) and F(2x2x2, 3x3x3) (Lavin & Gray): 3x3(x3) kernels,
// stride 1, no dilation. Each 4x4(x4) input tile and each kernel is transformed, the 16
// (or 64) Winograd-domain positions are 16 (64) GEMMs over the channels, and each
// product tile is transformed back to a 2x2(x2) output tile: 2.25x (3.4x) fewer
// multiply-adds than a direct or im2col conv, for some transform work and a small loss
// of accuracy (engine.md gives the figures).
//
// Same contract as cpu::conv_forward: tensors already checked and allocated, `opt` with
// exactly one value per spatial dim.
// ensures: results do not depend on the thread count or scheduling (each output tile is
// computed by one thread, in a fixed order).

#include "engine/ops.h"
#include "engine/tensor.h"

namespace quartet::engine::cpu {

// Winograd can compute this conv and its input gradient: 2 or 3 spatial dims, a 3 on
// every kernel axis, stride 1, dilation 1, padding at most 2.
bool winograd_supports(const Tensor& x, const Tensor& weight, const ConvOptions& opt);

// Winograd supports it and Cin and Cout are both at least 32 (2D) or 16 (3D), where it
// is measured to beat im2col: the automatic choice.
bool winograd_applies(const Tensor& x, const Tensor& weight, const ConvOptions& opt);

// out = conv(x, weight) + bias; bias may be undefined. requires winograd_supports.
void winograd_conv_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt,
                           Tensor& out);

// grad_x = the input gradient of conv(x, weight) for grad_out, overwritten: the conv of
// grad_out with the kernel flipped and its channel axes swapped, padded by 2 - padding.
// requires winograd_supports for the forward conv.
void winograd_conv_backward_data(const Tensor& weight, const Tensor& grad_out, const ConvOptions& opt,
                                 Tensor& grad_x);

}  // namespace quartet::engine::cpu

#pragma once

// cuDNN's three convolution passes over one ConvGeometry (cross-correlation, fp32 NCHW /
// NCDHW, packed), each with the algorithm cuDNN's heuristics rank first among those that
// run, a deterministic one first for the backward passes, and its workspace drawn from
// the engine's allocator. Pointers are device memory of `device`; results overwrite.

#include "engine/cuda/conv_geometry.h"
#include "engine/device.h"

namespace quartet::engine::cuda {

// y (n, c_out, *out) = conv(x (n, c_in, *in), w (c_out, c_in, *k)).
void cudnn_conv_forward(const Device& device, const ConvGeometry& g, const float* x, const float* w, float* y);

// dx (n, c_in, *in) = the input gradient of that conv at dy (n, c_out, *out).
void cudnn_conv_backward_data(const Device& device, const ConvGeometry& g, const float* w, const float* dy,
                              float* dx);

// dw (c_out, c_in, *k) = the filter gradient of that conv at x and dy, summed over n.
void cudnn_conv_backward_filter(const Device& device, const ConvGeometry& g, const float* x, const float* dy,
                                float* dw);

}  // namespace quartet::engine::cuda

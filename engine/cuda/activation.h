#pragma once

// The CUDA twins of engine/cpu/activation.h: element-wise activations and dropout on
// device tensors, same names, signatures and results. Shapes are checked by the ops.
#include "engine/random.h"
#include "engine/tensor.h"

namespace quartet::engine::cuda {

// out = x > 0 ? x : slope * x; grad_in = grad_out where x > 0, else slope * grad_out.
void leaky_relu(const Tensor& x, float slope, Tensor& out);
void leaky_relu_backward(const Tensor& grad_out, const Tensor& x, float slope, Tensor& grad_in);

// out = 1 / (1 + exp(-x)) without overflow; grad_in = grad_out * out * (1 - out).
void sigmoid(const Tensor& x, Tensor& out);
void sigmoid_backward(const Tensor& grad_out, const Tensor& out, Tensor& grad_in);

// grad_in = grad_out * (1 - out^2).
void tanh(const Tensor& x, Tensor& out);
void tanh_backward(const Tensor& grad_out, const Tensor& out, Tensor& grad_in);

// out = erf(x); grad_in = grad_out * 2 / sqrt(pi) * exp(-x^2).
void erf(const Tensor& x, Tensor& out);
void erf_backward(const Tensor& grad_out, const Tensor& x, Tensor& grad_in);

// The CPU's mask: drawn on the host from `gen` in element order (0 when
// gen.uniform(0, 1) < p, else 1 / (1 - p)), so a seed gives the same mask on either
// device; then uploaded to `mask` and out = x * mask on the device. requires 0 <= p < 1.
void dropout(const Tensor& x, float p, Generator& gen, Tensor& mask, Tensor& out);

}  // namespace quartet::engine::cuda

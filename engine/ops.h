#pragma once

// Every differentiable op of the engine, declared once. Each op checks its inputs
// (throwing std::invalid_argument that names the op and the shapes), allocates its
// output on the inputs' device, runs that device's kernel (engine/cpu/, engine/cuda/)
// and records its backward when an input requires grad.
//
// Shapes: N = batch, C = channels, D/H/W = depth/height/width, F = features.

#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace quartet::engine {

// ---- element-wise ----
Tensor add(const Tensor& a, const Tensor& b);  // same shape
Tensor mul(const Tensor& a, const Tensor& b);  // same shape
Tensor scale(const Tensor& a, float s);
Tensor relu(const Tensor& x);

// ---- reductions ----
Tensor sum(const Tensor& x);   // scalar, shape [1]
Tensor mean(const Tensor& x);  // scalar, shape [1]

// ---- shape ----
// Same storage, new shape; requires equal numel. One size may be -1 (inferred).
Tensor reshape(const Tensor& x, Shape shape);
// Collapses dims start_dim..end into one: (N, C, H, W) -> (N, C*H*W) for start_dim 1.
Tensor flatten(const Tensor& x, int start_dim = 1);

// ---- dense ----
Tensor matmul(const Tensor& a, const Tensor& b);  // a: (M, K), b: (K, N) -> (M, N)
// x: (N, in), weight: (out, in) as PyTorch stores it, bias: (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// ---- convolution and pooling (1 to 3 spatial dims; 2D and 3D share one code path) ----
// Per spatial dim; a single value applies to every dim.
struct ConvOptions {
  std::vector<int64_t> stride{1};
  std::vector<int64_t> padding{0};
  std::vector<int64_t> dilation{1};
};
// x: (N, Cin, *spatial), weight: (Cout, Cin, *kernel) (OIHW / OIDHW), bias: (Cout) or
// undefined. Zero padding. Out size per dim: (in + 2p - d(k-1) - 1) / s + 1.
Tensor conv(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt);
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt = {});
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt = {});

struct PoolOptions {
  std::vector<int64_t> kernel{2};
  std::vector<int64_t> stride{};   // empty: equal to kernel (PyTorch's default)
  std::vector<int64_t> padding{0}; // padded cells never win (-inf)
};
// x: (N, C, *spatial). Gradient goes to the first maximum of each window.
Tensor max_pool(const Tensor& x, const PoolOptions& opt);
Tensor max_pool2d(const Tensor& x, const PoolOptions& opt = {});

// ---- losses ----
// logits: (N, classes); targets: N class indices in [0, classes). Mean over the batch
// of -log softmax(logits)[target], computed stably.
Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets);

}  // namespace quartet::engine

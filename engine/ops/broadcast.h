#pragma once

// What add and mul (engine/ops/elementwise.cpp) share with the broadcasting ops of
// engine/ops/broadcast.cpp when their inputs' shapes differ.
#include "engine/cuda/strided_index.h"
#include "engine/tensor.h"

namespace quartet::engine::detail {

// a (kind) b with NumPy's broadcasting; gradients summed back to each input's shape.
Tensor broadcast_binary(cuda::BinaryKind kind, const Tensor& a, const Tensor& b, const char* op);

}  // namespace quartet::engine::detail

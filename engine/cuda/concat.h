#pragma once

// The CUDA twins of engine/cpu/concat.h: concatenation along one dim and its adjoint on
// device tensors the op has checked. Each tensor is viewed as (outer, size along dim, inner).
#include "engine/tensor.h"

namespace quartet::engine::cuda {

// out = xs laid end to end along `dim` (0 <= dim < rank).
void concat(const TensorList& xs, int dim, Tensor& out);

// slice (overwritten) = the part of `whole` at [offset, offset + slice.size(dim)) along dim.
void concat_slice(const Tensor& whole, int dim, int64_t offset, Tensor& slice);

}  // namespace quartet::engine::cuda

#pragma once

// The CUDA twins of engine/cpu/optim.h: one SGD or Adam/AdamW update of a device
// parameter, its gradient and state, in place. The step descriptions are the CPU's
// structs, which engine/optim.cpp builds once for either device.
#include "engine/cpu/optim.h"
#include "engine/tensor.h"

namespace quartet::engine::cuda {

// param -= lr * direction, buf updated in place; buf is not touched (and may be
// undefined) when s.momentum is 0.
void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const cpu::SgdStep& s);

// One Adam/AdamW update of param with exp_avg and exp_avg_sq in place.
void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const cpu::AdamStep& s);

}  // namespace quartet::engine::cuda

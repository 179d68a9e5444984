#pragma once

// tensor_parallel: N ranks split every block of the model (Megatron-LM): each rank holds
// its slice of the attention heads and of the MLP's hidden units (workloads/gpt.h) and
// computes its part of every sample of the batch; per block, one all-reduce of the
// activations in forward and one of their gradients in backward join the slices. Every
// rank trains on the whole batch; the parameters every rank holds whole (embeddings,
// layer norms, the head) get the same gradients on each and stay equal without
// communication. Roles "rank0" .. "rank{N-1}"; rank 0 gathers the whole model from the
// slices to evaluate it and write its weights. With sequence_parallel (Korthikanti et al.
// 2022) each rank holds 1/N of the sequence between the split regions: its layer norms
// and residual adds run on its own positions, an all-gather and a reduce-scatter replace
// each all-reduce, and the gradients of the whole parameters are averaged over the ranks.

#include <cstdint>
#include <string>

#include "trainers/regime.h"

namespace quartet::trainers::tensor_parallel {

struct Settings : RegimeSettings {
  int64_t ranks = 2;
  std::string backend = "shm";  // shm, gloo (CPU); nccl (GPU)
  bool sequence_parallel = false;  // layer norms and residuals on 1/ranks of the sequence

  static const SettingsTable<Settings>& table();
};

const Regime& regime();

}  // namespace quartet::trainers::tensor_parallel

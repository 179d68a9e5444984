#pragma once

// context_parallel: N ranks split the sequence of every sample (ring attention, Liu et al.
// 2023): the context cut into 2N chunks, rank r holding chunks r and 2N - 1 - r of every
// sequence (the load-balanced causal split: as much attention work on every rank). Each
// rank runs the embeddings, layer norms, MLPs and the head on its own tokens; attention
// passes each rank's key/value block round the ring of ranks (engine::ring_attention),
// forward and backward, while it computes on the block it holds. Every rank trains on
// the whole batch, holds every parameter, and its gradients (of the loss over its tokens)
// are averaged over the ranks, as data_parallel's are. docs/context_parallel.md has what
// each rank holds and sends. Roles "rank0" .. "rank{N-1}"; rank 0 evaluates.

#include <cstdint>
#include <string>

#include "trainers/regime.h"

namespace quartet::trainers::context_parallel {

struct Settings : RegimeSettings {
  int64_t ranks = 2;
  std::string backend = "shm";  // shm, gloo (CPU: ring attention has no GPU kernels yet)

  static const SettingsTable<Settings>& table();
};

const Regime& regime();

}  // namespace quartet::trainers::context_parallel

#pragma once

// expert_parallel: N ranks spread the experts of a mixture-of-experts model (gpt-moe) over
// themselves, E/N each (rank r experts r E/N .. (r+1) E/N - 1), and split every batch as
// data_parallel does: each rank routes its own tokens, sends those for other ranks'
// experts there by all-to-all, runs its experts on what arrives, and sends the outputs
// back by all-to-all (backward: the same two, gradients the other way). The parameters
// outside the experts are every rank's copy, their gradients averaged by all-reduce; an
// expert's gradient is its owner's, over every rank's tokens. Roles "rank0" ..
// "rank{N-1}"; rank 0 gathers the whole model from the ranks' experts to evaluate it and
// write its weights. docs/moe.md has what each rank holds and sends.

#include <cstdint>
#include <string>

#include "trainers/regime.h"

namespace quartet::trainers::expert_parallel {

struct Settings : RegimeSettings {
  int64_t ranks = 2;
  std::string backend = "shm";  // shm, gloo (CPU)
  int64_t micro_batches = 1;

  static const SettingsTable<Settings>& table();
};

const Regime& regime();

}  // namespace quartet::trainers::expert_parallel

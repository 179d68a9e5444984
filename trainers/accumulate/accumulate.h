#pragma once

// accumulate: gradient accumulation. One process, k micro-batches of B/k per optimizer
// step: the same update as `single` with the whole batch (no BatchNorm), with about 1/k
// of its activations.

#include <cstdint>

#include "trainers/regime.h"

namespace quartet::trainers::accumulate {

struct Settings : RegimeSettings {
  int64_t micro_batches = 1;

  static const SettingsTable<Settings>& table();
};

const Regime& regime();

}  // namespace quartet::trainers::accumulate

#pragma once

// single: the baseline. One process trains the whole model, the whole batch per step.

#include "trainers/regime.h"

namespace quartet::trainers::single {

// No settings of its own: the arm's training settings are all it needs.
struct Settings : RegimeSettings {
  static const SettingsTable<Settings>& table();
};

const Regime& regime();

}  // namespace quartet::trainers::single

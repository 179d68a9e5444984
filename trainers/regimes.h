#pragma once

// Factories of the regimes, one file each; make_regime() picks by name.
#include <memory>

#include "trainers/regime.h"

namespace quartet::trainers {
std::unique_ptr<Regime> make_single();
std::unique_ptr<Regime> make_accumulate();
std::unique_ptr<Regime> make_data_parallel();
std::unique_ptr<Regime> make_federated();
std::unique_ptr<Regime> make_split();
}  // namespace quartet::trainers

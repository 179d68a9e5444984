#pragma once

#include <nlohmann/json.hpp>

namespace quartet::runner {

// What a run records about where it ran: commit, build type and flags, compiler, CPU,
// cores, thread settings, library versions.
nlohmann::json environment();

}  // namespace quartet::runner

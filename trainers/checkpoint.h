#pragma once

// Checkpoints: model weights, optimizer state and the position in training, in one
// safetensors file written atomically.

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/model.h"
#include "engine/optim.h"

namespace quartet::trainers {

struct Position {
  int64_t epochs_done = 0;   // whole epochs finished
  int64_t step = 0;          // optimizer steps taken
  int64_t samples = 0;       // training samples processed
  double wall = 0.0;         // arm seconds elapsed
  int64_t records_bytes = 0; // size of the role's record file at this point
  nlohmann::json extra = nlohmann::json::object();  // regime-specific (RNG states, ...)
};

void save_checkpoint(const std::filesystem::path& path, const engine::Module& model,
                     const engine::Optimizer& optimizer, const Position& position);

// Loads weights and optimizer state in place; nullopt when no checkpoint exists.
// Throws std::runtime_error naming the file when it exists but does not fit the model.
std::optional<Position> load_checkpoint(const std::filesystem::path& path, engine::Module& model,
                                        engine::Optimizer& optimizer);

}  // namespace quartet::trainers

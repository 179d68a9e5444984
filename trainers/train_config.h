#pragma once

// An arm's training settings (the spec's `train` object, the experiment's patched by the
// arm's own): typed, each field's name, default and range written once, here.

#include <cstdint>
#include <optional>
#include <string>

#include "trainers/optimizer.h"
#include "trainers/settings/table.h"

namespace quartet::trainers {

struct TrainConfig {
  int64_t epochs = 1;
  int64_t batch = 64;          // samples behind one optimizer step of the global model
  std::optional<double> target;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  double clip_grad_norm = 0.0;  // 0: off
  int64_t eval_batch = 1000;
  int64_t max_steps = 0;        // 0: no cap
  // Activation checkpointing per stage (engine::Model::set_checkpointing) on every model
  // a role trains.
  bool checkpoint = false;
  // Matrix products and convolutions on a GPU: "fp32" exact, "tf32" on tensor cores
  // (inputs rounded to 10-bit mantissas, fp32 sums). The CPU computes fp32 either way.
  std::string precision = "fp32";
  uint64_t seed = 1;            // shuffling and partitions (weights come from the arm's initial weights)

  // The fields of the spec's `train` object (seed is the experiment's, not among them).
  static const SettingsTable<TrainConfig>& table();
  // Validates and reads a `train` object (defaults filled in place), cross-field rules
  // included; throws SettingsError naming `path`.
  static TrainConfig parse(nlohmann::json& train, const std::string& path);
};

}  // namespace quartet::trainers

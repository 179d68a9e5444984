#pragma once

// An arm's training settings (the spec's `train` object, the experiment's patched by the
// arm's own): typed, each field's name, default and range written once, here.

#include <cstdint>
#include <optional>
#include <string>

#include "trainers/optimizer.h"
#include "trainers/settings/table.h"

namespace quartet::trainers {

// What a spec may ask for and still run (the parser refuses more, naming the field): a
// million passes over the data, or rounds, is a run that ends; a batch of 2^24 samples
// is far past any training set here (the spec also checks it against the set's size).
inline constexpr int64_t kMaxEpochs = 1'000'000;
inline constexpr int64_t kMaxRounds = 1'000'000;
inline constexpr int64_t kMaxBatch = int64_t{1} << 24;
// Seconds a deadline or timeout may be: at least 10 ms (a shorter one fails every round or
// turn), at most a week.
inline constexpr double kMinTimeoutSeconds = 0.01;
inline constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600.0;

struct TrainConfig {
  int64_t epochs = 1;
  int64_t batch = 64;          // samples behind one optimizer step of the global model
  std::optional<double> target;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  double clip_grad_norm = 0.0;  // 0: off
  int64_t eval_batch = 1000;
  // Training samples between evaluations inside an epoch (each epoch's end evaluates too);
  // 0: eval_interval() picks it so that a short run still draws a curve.
  int64_t eval_every = 0;
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

// Evaluations a run of fewer epochs than this still makes, when eval_every is 0.
inline constexpr int64_t kMinEvaluations = 5;

// Training samples between evaluations inside an epoch of `train_size` samples: eval_every,
// or (0) the epoch split evenly into ceil(kMinEvaluations / epochs) parts, so that an arm of
// one epoch evaluates five times and one of five epochs or more once an epoch.
int64_t eval_interval(const TrainConfig& cfg, int64_t train_size);

// Whether a step that took the epoch from `before` to `after` training samples (counted
// from the epoch's start) passes an evaluation point: a multiple of eval_interval(). The
// same for every regime, so every arm evaluates at the same points of its training (a
// step's end, the first at or past each point). An epoch's end evaluates besides.
bool evaluation_due(const TrainConfig& cfg, int64_t train_size, int64_t before, int64_t after);

}  // namespace quartet::trainers

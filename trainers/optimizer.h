#pragma once

// The optimizer and learning-rate schedule an arm's spec names, built the same way for
// every regime. Their settings are typed (settings/table.h): each field's JSON name,
// default and range are written here once.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/optim.h"
#include "engine/schedule.h"
#include "trainers/settings/table.h"

namespace quartet::trainers {

// Rates and factors are kept as the spec writes them (double) and rounded to the
// engine's float once, where the optimizer or schedule is made.
// The largest learning rate a spec may give (server_lr too): larger steps diverge at once,
// and a rate past float's range would be infinite.
inline constexpr double kMaxLr = 1000.0;

struct OptimizerConfig {
  std::string name = "sgd";  // sgd, adam, adamw
  double lr = 0.05;
  double momentum = 0.0;     // sgd
  bool nesterov = false;     // sgd
  double weight_decay = 0.0; // sgd and adam: L2 on the gradient; adamw: decoupled
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw

  static const SettingsTable<OptimizerConfig>& table();
  // Cross-field rules (Nesterov needs sgd and momentum); throws SettingsError under `path`.
  void check(const std::string& path) const;
};

struct ScheduleConfig {
  std::string name = "constant";  // constant, step, cosine
  int64_t step_size = 1;          // step: decay every step_size optimizer steps
  double gamma = 0.1;             // step
  double min_lr = 0.0;            // cosine
  int64_t warmup_steps = 0;       // linear warm-up in front of any schedule
  double warmup_start_factor = 1.0 / 3.0;
  int64_t scale_base_batch = 0;   // >0: linear scaling rule, lr * batch / scale_base_batch

  static const SettingsTable<ScheduleConfig>& table();
};

// Throws std::invalid_argument naming the unknown optimizer.
std::unique_ptr<engine::Optimizer> make_optimizer(const OptimizerConfig& cfg, std::vector<engine::Tensor> params);

// The schedule over `total_steps` optimizer steps (cosine spans those after warm-up);
// the base rate is cfg's lr, scaled by the linear scaling rule for `batch` when asked.
std::shared_ptr<const engine::LrSchedule> make_schedule(const OptimizerConfig& opt, const ScheduleConfig& cfg,
                                                        int64_t batch, int64_t total_steps);

}  // namespace quartet::trainers

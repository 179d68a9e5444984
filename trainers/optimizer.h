#pragma once

// The optimizer and learning-rate schedule an arm's spec names, built the same way for
// every regime.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/optim.h"
#include "engine/schedule.h"

namespace quartet::trainers {

struct OptimizerConfig {
  std::string name = "sgd";  // sgd, adam, adamw
  float lr = 0.05f;
  float momentum = 0.0f;     // sgd
  bool nesterov = false;     // sgd
  float weight_decay = 0.0f; // sgd and adam: L2 on the gradient; adamw: decoupled
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adam, adamw
};

struct ScheduleConfig {
  std::string name = "constant";  // constant, step, cosine
  int64_t step_size = 1;          // step: decay every step_size optimizer steps
  float gamma = 0.1f;             // step
  float min_lr = 0.0f;            // cosine
  int64_t warmup_steps = 0;       // linear warm-up in front of any schedule
  float warmup_start_factor = 1.0f / 3.0f;
  int64_t scale_base_batch = 0;   // >0: linear scaling rule, lr * batch / scale_base_batch
};

// Throws std::invalid_argument naming the unknown optimizer.
std::unique_ptr<engine::Optimizer> make_optimizer(const OptimizerConfig& cfg, std::vector<engine::Tensor> params);

// The schedule over `total_steps` optimizer steps (cosine spans those after warm-up);
// the base rate is cfg's lr, scaled by the linear scaling rule for `batch` when asked.
std::shared_ptr<const engine::LrSchedule> make_schedule(const OptimizerConfig& opt, const ScheduleConfig& cfg,
                                                        int64_t batch, int64_t total_steps);

}  // namespace quartet::trainers

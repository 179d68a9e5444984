#include "trainers/optimizer.h"

#include <algorithm>
#include <stdexcept>

namespace quartet::trainers {

std::unique_ptr<engine::Optimizer> make_optimizer(const OptimizerConfig& c, std::vector<engine::Tensor> params) {
  if (c.name == "sgd")
    return std::make_unique<engine::SGD>(
        std::move(params), engine::SgdOptions{.lr = c.lr, .momentum = c.momentum, .dampening = 0.0f,
                                              .nesterov = c.nesterov, .weight_decay = c.weight_decay});
  if (c.name == "adam")
    return std::make_unique<engine::Adam>(std::move(params), engine::AdamOptions{c.lr, c.beta1, c.beta2, c.eps,
                                                                                 c.weight_decay});
  if (c.name == "adamw")
    return std::make_unique<engine::AdamW>(std::move(params), engine::AdamWOptions{c.lr, c.beta1, c.beta2, c.eps,
                                                                                   c.weight_decay});
  throw std::invalid_argument("unknown optimizer \"" + c.name + "\"; known: sgd, adam, adamw");
}

std::shared_ptr<const engine::LrSchedule> make_schedule(const OptimizerConfig& opt, const ScheduleConfig& c,
                                                        int64_t batch, int64_t total_steps) {
  const float base = c.scale_base_batch > 0 ? engine::scaled_lr(opt.lr, batch, c.scale_base_batch) : opt.lr;
  std::shared_ptr<const engine::LrSchedule> s;
  if (c.name == "constant") s = std::make_shared<engine::ConstantLr>(base);
  else if (c.name == "step") s = std::make_shared<engine::StepLr>(base, c.step_size, c.gamma);
  else if (c.name == "cosine")
    s = std::make_shared<engine::CosineLr>(base, std::max<int64_t>(1, total_steps - c.warmup_steps),
                                           std::min(c.min_lr, base));
  else throw std::invalid_argument("unknown schedule \"" + c.name + "\"; known: constant, step, cosine");
  if (c.warmup_steps > 0) s = std::make_shared<engine::LinearWarmup>(s, c.warmup_steps, c.warmup_start_factor);
  return s;
}

}  // namespace quartet::trainers

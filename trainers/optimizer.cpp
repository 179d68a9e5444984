#include "trainers/optimizer.h"

#include <algorithm>
#include <stdexcept>

namespace quartet::trainers {

const SettingsTable<OptimizerConfig>& OptimizerConfig::table() {
  static const SettingsTable<OptimizerConfig> t = [] {
    using O = OptimizerConfig;
    SettingsTable<O> t;
    t.add(&O::name, "name", "optimizer").allowed({"sgd", "adam", "adamw"});
    t.add(&O::lr, "lr", "learning rate; at most 1000 (a step that large diverges at once)").above(0.0).at_most(kMaxLr);
    t.add(&O::momentum, "momentum", "SGD momentum").at_least(0.0).at_most(1.0).applies_when("name", {"sgd"});
    t.add(&O::nesterov, "nesterov", "sgd: Nesterov momentum").applies_when("name", {"sgd"});
    t.add(&O::weight_decay, "weight_decay", "weight decay: L2 on the gradient (sgd, adam), decoupled (adamw)")
        .at_least(0.0);
    t.add(&O::beta1, "beta1", "adam, adamw: first-moment decay").at_least(0.0).at_most(0.999999)
        .applies_when("name", {"adam", "adamw"});
    t.add(&O::beta2, "beta2", "adam, adamw: second-moment decay").at_least(0.0).at_most(0.999999)
        .applies_when("name", {"adam", "adamw"});
    t.add(&O::eps, "eps", "adam, adamw: added to the denominator").at_least(0.0)
        .applies_when("name", {"adam", "adamw"});
    return t;
  }();
  return t;
}

void OptimizerConfig::check(const std::string& path) const {
  if (nesterov && name != "sgd") throw SettingsError(path + ".nesterov: only sgd has Nesterov momentum");
  if (nesterov && momentum <= 0.0) throw SettingsError(path + ".nesterov: Nesterov momentum needs momentum > 0");
}

const SettingsTable<ScheduleConfig>& ScheduleConfig::table() {
  static const SettingsTable<ScheduleConfig> t = [] {
    using S = ScheduleConfig;
    SettingsTable<S> t;
    t.add(&S::name, "name", "schedule").allowed({"constant", "step", "cosine"});
    t.add(&S::step_size, "step_size", "step: decay every this many optimizer steps")
        .at_least(1)
        .applies_when("name", {"step"});
    t.add(&S::gamma, "gamma", "step: decay factor").above(0.0).applies_when("name", {"step"});
    t.add(&S::min_lr, "min_lr", "cosine: the rate at the end").at_least(0.0).applies_when("name", {"cosine"});
    t.add(&S::warmup_steps, "warmup_steps", "linear warm-up steps in front of the schedule; 0: none").at_least(0);
    t.add(&S::warmup_start_factor, "warmup_start_factor", "warm-up starts at this fraction of the rate")
        .above(0.0)
        .at_most(1.0);
    t.add(&S::scale_base_batch, "scale_base_batch",
          "linear scaling rule (Goyal et al. 2017): lr x batch / this; 0: off")
        .at_least(0);
    return t;
  }();
  return t;
}

std::unique_ptr<engine::Optimizer> make_optimizer(const OptimizerConfig& c, std::vector<engine::Tensor> params) {
  const float lr = static_cast<float>(c.lr), momentum = static_cast<float>(c.momentum),
              weight_decay = static_cast<float>(c.weight_decay), beta1 = static_cast<float>(c.beta1),
              beta2 = static_cast<float>(c.beta2), eps = static_cast<float>(c.eps);
  if (c.name == "sgd")
    return std::make_unique<engine::SGD>(
        std::move(params), engine::SgdOptions{.lr = lr, .momentum = momentum, .dampening = 0.0f,
                                              .nesterov = c.nesterov, .weight_decay = weight_decay});
  if (c.name == "adam")
    return std::make_unique<engine::Adam>(std::move(params),
                                          engine::AdamOptions{lr, beta1, beta2, eps, weight_decay});
  if (c.name == "adamw")
    return std::make_unique<engine::AdamW>(std::move(params),
                                           engine::AdamWOptions{lr, beta1, beta2, eps, weight_decay});
  throw std::invalid_argument("unknown optimizer \"" + c.name + "\"; known: sgd, adam, adamw");
}

std::shared_ptr<const engine::LrSchedule> make_schedule(const OptimizerConfig& opt, const ScheduleConfig& c,
                                                        int64_t batch, int64_t total_steps) {
  const float lr = static_cast<float>(opt.lr);
  const float base = c.scale_base_batch > 0 ? engine::scaled_lr(lr, batch, c.scale_base_batch) : lr;
  std::shared_ptr<const engine::LrSchedule> s;
  if (c.name == "constant") s = std::make_shared<engine::ConstantLr>(base);
  else if (c.name == "step") s = std::make_shared<engine::StepLr>(base, c.step_size, static_cast<float>(c.gamma));
  else if (c.name == "cosine")
    s = std::make_shared<engine::CosineLr>(base, std::max<int64_t>(1, total_steps - c.warmup_steps),
                                           std::min(static_cast<float>(c.min_lr), base));
  else throw std::invalid_argument("unknown schedule \"" + c.name + "\"; known: constant, step, cosine");
  if (c.warmup_steps > 0)
    s = std::make_shared<engine::LinearWarmup>(s, c.warmup_steps, static_cast<float>(c.warmup_start_factor));
  return s;
}

}  // namespace quartet::trainers

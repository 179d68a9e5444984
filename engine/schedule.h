#pragma once

// Learning-rate schedules as pure functions of the optimizer step, so every regime (and
// a resumed run) gets the same rate at the same step without carrying scheduler state:
//   opt.set_lr(schedule.lr_at(steps_taken)); opt.step();
// Constructors throw std::invalid_argument naming the bad parameter.

#include <cstdint>
#include <memory>

namespace quartet::engine {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // The rate for the update that follows `step` optimizer steps (0-based: lr_at(0) is
  // the first update's). requires step >= 0.
  virtual float lr_at(int64_t step) const = 0;
};

// lr_at(t) = lr.
class ConstantLr : public LrSchedule {
 public:
  explicit ConstantLr(float lr);  // requires lr >= 0
  float lr_at(int64_t step) const override;

 private:
  float lr_;
};

// PyTorch's StepLR: lr_at(t) = base_lr * gamma^floor(t / step_size).
class StepLr : public LrSchedule {
 public:
  // requires base_lr >= 0, step_size >= 1, gamma > 0.
  StepLr(float base_lr, int64_t step_size, float gamma = 0.1f);
  float lr_at(int64_t step) const override;

 private:
  float base_lr_;
  int64_t step_size_;
  float gamma_;
};

// PyTorch's CosineAnnealingLR closed form with T_max = total_steps, eta_min = min_lr:
//   lr_at(t) = min_lr + (base_lr - min_lr) (1 + cos(pi t / total_steps)) / 2.
// Unlike PyTorch, whose cosine climbs again past T_max, steps past total_steps hold
// min_lr.
class CosineLr : public LrSchedule {
 public:
  // requires 0 <= min_lr <= base_lr, total_steps >= 1.
  CosineLr(float base_lr, int64_t total_steps, float min_lr = 0.0f);
  float lr_at(int64_t step) const override;

 private:
  float base_lr_;
  int64_t total_steps_;
  float min_lr_;
};

// Linear warm-up in front of any schedule, as PyTorch's SequentialLR([LinearLR(
// start_factor, end_factor=1, total_iters=W), after], milestones=[W]) with W =
// warmup_steps: `after` starts at its own step 0 when the warm-up ends.
//   t <  W: lr_at(t) = after.lr_at(0) * (start_factor + (1 - start_factor) t / W)
//   t >= W: lr_at(t) = after.lr_at(t - W)
// So a cosine over T steps behind W warm-up steps reaches min_lr at step W + T.
class LinearWarmup : public LrSchedule {
 public:
  // requires after, warmup_steps >= 0, 0 < start_factor <= 1 (as LinearLR).
  LinearWarmup(std::shared_ptr<const LrSchedule> after, int64_t warmup_steps, float start_factor = 1.0f / 3.0f);
  float lr_at(int64_t step) const override;

 private:
  std::shared_ptr<const LrSchedule> after_;
  int64_t warmup_steps_;
  float start_factor_;
};

// The linear scaling rule (Goyal et al. 2017): base_lr * batch / base_batch, the rate
// for `batch` given one tuned at `base_batch`. requires base_lr >= 0, batch >= 1,
// base_batch >= 1.
float scaled_lr(float base_lr, int64_t batch, int64_t base_batch);

}  // namespace quartet::engine

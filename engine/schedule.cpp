#include "engine/schedule.h"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>
#include <utility>

namespace quartet::engine {
namespace {

template <class T>
[[noreturn]] void refuse(const char* schedule, const char* param, const char* range, T value) {
  throw std::invalid_argument(std::string(schedule) + ": " + param + " must be " + range + ", got " +
                              std::to_string(value));
}

void check_lr(const char* schedule, const char* param, float lr) {
  if (!(lr >= 0.0f) || !std::isfinite(lr)) refuse(schedule, param, "finite and >= 0", lr);
}

void check_step(const char* schedule, int64_t step) {
  if (step < 0) refuse(schedule, "step", ">= 0", step);
}

}  // namespace

ConstantLr::ConstantLr(float lr) : lr_(lr) { check_lr("constant lr", "lr", lr); }

float ConstantLr::lr_at(int64_t step) const {
  check_step("constant lr", step);
  return lr_;
}

StepLr::StepLr(float base_lr, int64_t step_size, float gamma)
    : base_lr_(base_lr), step_size_(step_size), gamma_(gamma) {
  check_lr("step lr", "base_lr", base_lr);
  if (step_size < 1) refuse("step lr", "step_size", ">= 1", step_size);
  if (!(gamma > 0.0f) || !std::isfinite(gamma)) refuse("step lr", "gamma", "finite and > 0", gamma);
}

float StepLr::lr_at(int64_t step) const {
  check_step("step lr", step);
  const double decays = static_cast<double>(step / step_size_);
  return static_cast<float>(base_lr_ * std::pow(static_cast<double>(gamma_), decays));
}

CosineLr::CosineLr(float base_lr, int64_t total_steps, float min_lr)
    : base_lr_(base_lr), total_steps_(total_steps), min_lr_(min_lr) {
  check_lr("cosine lr", "base_lr", base_lr);
  if (total_steps < 1) refuse("cosine lr", "total_steps", ">= 1", total_steps);
  if (!(min_lr >= 0.0f && min_lr <= base_lr)) refuse("cosine lr", "min_lr", "in [0, base_lr]", min_lr);
}

float CosineLr::lr_at(int64_t step) const {
  check_step("cosine lr", step);
  if (step >= total_steps_) return min_lr_;
  const double progress = static_cast<double>(step) / static_cast<double>(total_steps_);
  return static_cast<float>(min_lr_ + (static_cast<double>(base_lr_) - min_lr_) *
                                          (1.0 + std::cos(std::numbers::pi * progress)) / 2.0);
}

LinearWarmup::LinearWarmup(std::shared_ptr<const LrSchedule> after, int64_t warmup_steps, float start_factor)
    : after_(std::move(after)), warmup_steps_(warmup_steps), start_factor_(start_factor) {
  if (!after_) throw std::invalid_argument("linear warmup: the schedule after the warm-up is missing");
  if (warmup_steps < 0) refuse("linear warmup", "warmup_steps", ">= 0", warmup_steps);
  if (!(start_factor > 0.0f && start_factor <= 1.0f))
    refuse("linear warmup", "start_factor", "in (0, 1]", start_factor);
}

float LinearWarmup::lr_at(int64_t step) const {
  check_step("linear warmup", step);
  if (step >= warmup_steps_) return after_->lr_at(step - warmup_steps_);
  const double factor = start_factor_ + (1.0 - start_factor_) * static_cast<double>(step) /
                                            static_cast<double>(warmup_steps_);
  return static_cast<float>(after_->lr_at(0) * factor);
}

float scaled_lr(float base_lr, int64_t batch, int64_t base_batch) {
  check_lr("scaled_lr", "base_lr", base_lr);
  if (batch < 1) refuse("scaled_lr", "batch", ">= 1", batch);
  if (base_batch < 1) refuse("scaled_lr", "base_batch", ">= 1", base_batch);
  return static_cast<float>(static_cast<double>(base_lr) * static_cast<double>(batch) /
                            static_cast<double>(base_batch));
}

}  // namespace quartet::engine

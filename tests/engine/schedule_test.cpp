#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numbers>
#include <string>

#include "engine/schedule.h"

namespace quartet::engine {
namespace {

// The message of the std::invalid_argument fn throws, or "" when none is thrown.
template <class Fn>
std::string invalid_argument_message(Fn&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

double cosine(double base, double min, double t, double total) {
  return min + (base - min) * (1.0 + std::cos(std::numbers::pi * t / total)) / 2.0;
}

TEST(Schedule, ConstantIsTheSameAtEveryStep) {
  ConstantLr s(0.05f);
  for (int64_t t : {0, 1, 1000, 1000000}) EXPECT_EQ(s.lr_at(t), 0.05f);
}

TEST(Schedule, StepDecaysByGammaEveryStepSize) {
  // base * gamma^floor(t / 3): 0.1 for t in 0..2, 0.05 for 3..5, 0.025 for 6..8.
  StepLr s(0.1f, 3, 0.5f);
  EXPECT_FLOAT_EQ(s.lr_at(0), 0.1f);
  EXPECT_FLOAT_EQ(s.lr_at(2), 0.1f);
  EXPECT_FLOAT_EQ(s.lr_at(3), 0.05f);
  EXPECT_FLOAT_EQ(s.lr_at(5), 0.05f);
  EXPECT_FLOAT_EQ(s.lr_at(6), 0.025f);
  EXPECT_FLOAT_EQ(s.lr_at(30), static_cast<float>(0.1 * std::pow(0.5, 10)));
}

TEST(Schedule, CosineFollowsTheClosedForm) {
  CosineLr s(0.1f, 10, 0.01f);
  EXPECT_FLOAT_EQ(s.lr_at(0), 0.1f);
  EXPECT_FLOAT_EQ(s.lr_at(5), 0.055f);  // halfway: the mean of base and min
  for (int64_t t : {1, 3, 7, 9}) EXPECT_FLOAT_EQ(s.lr_at(t), static_cast<float>(cosine(0.1f, 0.01f, t, 10))) << t;
  EXPECT_FLOAT_EQ(s.lr_at(10), 0.01f);
}

TEST(Schedule, CosineHoldsMinLrPastTotalSteps) {
  CosineLr s(0.1f, 10, 0.01f);
  EXPECT_EQ(s.lr_at(11), 0.01f);
  EXPECT_EQ(s.lr_at(25), 0.01f);
}

TEST(Schedule, WarmupRampsLinearlyFromStartFactorToTheScheduleStart) {
  // W = 4, start_factor 0.25 in front of a constant 0.2: 0.2 (0.25 + 0.75 t / 4).
  LinearWarmup s(std::make_shared<ConstantLr>(0.2f), 4, 0.25f);
  EXPECT_FLOAT_EQ(s.lr_at(0), 0.05f);
  EXPECT_FLOAT_EQ(s.lr_at(1), 0.0875f);
  EXPECT_FLOAT_EQ(s.lr_at(2), 0.125f);
  EXPECT_FLOAT_EQ(s.lr_at(3), 0.1625f);
  EXPECT_FLOAT_EQ(s.lr_at(4), 0.2f);
  EXPECT_FLOAT_EQ(s.lr_at(100), 0.2f);
}

TEST(Schedule, WarmupThenCosineStartsTheCosineWhenTheWarmupEnds) {
  // SequentialLR convention: the cosine's step 0 is warm-up step W = 5.
  const float base = 0.4f, min = 0.04f;
  LinearWarmup s(std::make_shared<CosineLr>(base, 20, min), 5, 0.1f);
  EXPECT_FLOAT_EQ(s.lr_at(0), 0.04f);
  EXPECT_FLOAT_EQ(s.lr_at(3), static_cast<float>(0.4 * (0.1 + 0.9 * 3.0 / 5.0)));
  EXPECT_FLOAT_EQ(s.lr_at(5), base);
  for (int64_t t : {6, 10, 15, 24})
    EXPECT_FLOAT_EQ(s.lr_at(t), static_cast<float>(cosine(base, min, static_cast<double>(t - 5), 20))) << t;
  EXPECT_FLOAT_EQ(s.lr_at(25), min);
}

TEST(Schedule, ZeroWarmupStepsPassTheScheduleThrough) {
  LinearWarmup s(std::make_shared<StepLr>(0.1f, 2, 0.5f), 0);
  EXPECT_FLOAT_EQ(s.lr_at(0), 0.1f);
  EXPECT_FLOAT_EQ(s.lr_at(2), 0.05f);
}

TEST(Schedule, LinearScalingRuleMultipliesByTheBatchRatio) {
  // Goyal et al.: 0.1 at batch 256 becomes 0.4 at 1024 and 0.025 at 64.
  EXPECT_FLOAT_EQ(scaled_lr(0.1f, 1024, 256), 0.4f);
  EXPECT_FLOAT_EQ(scaled_lr(0.1f, 64, 256), 0.025f);
  EXPECT_FLOAT_EQ(scaled_lr(0.1f, 256, 256), 0.1f);
}

TEST(Schedule, InvalidParametersAreRefusedNamingThem) {
  EXPECT_NE(invalid_argument_message([] { ConstantLr(-0.1f); }).find("lr"), std::string::npos);
  EXPECT_NE(invalid_argument_message([] { StepLr(0.1f, 0); }).find("step_size"), std::string::npos);
  EXPECT_NE(invalid_argument_message([] { StepLr(0.1f, 2, 0.0f); }).find("gamma"), std::string::npos);
  EXPECT_NE(invalid_argument_message([] { CosineLr(0.1f, 0); }).find("total_steps"), std::string::npos);
  EXPECT_NE(invalid_argument_message([] { CosineLr(0.1f, 10, 0.2f); }).find("min_lr"), std::string::npos);
  EXPECT_NE(invalid_argument_message([] { LinearWarmup(std::make_shared<ConstantLr>(0.1f), -1); })
                .find("warmup_steps"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([] { LinearWarmup(std::make_shared<ConstantLr>(0.1f), 5, 0.0f); })
                .find("start_factor"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([] { LinearWarmup(nullptr, 5); }).find("schedule"), std::string::npos);
  EXPECT_NE(invalid_argument_message([] { scaled_lr(0.1f, 0, 256); }).find("batch"), std::string::npos);
  EXPECT_NE(invalid_argument_message([] { scaled_lr(0.1f, 256, 0); }).find("base_batch"), std::string::npos);
}

TEST(Schedule, NegativeStepsAreRefused) {
  EXPECT_THROW(ConstantLr(0.1f).lr_at(-1), std::invalid_argument);
  EXPECT_THROW(CosineLr(0.1f, 10).lr_at(-1), std::invalid_argument);
}

}  // namespace
}  // namespace quartet::engine

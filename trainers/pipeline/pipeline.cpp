// The pipeline regime's settings, their checks against the model and the machine, and
// the regime object; a stage process is trainers/pipeline/stage.cpp.

#include "trainers/pipeline/pipeline.h"

#include <algorithm>

namespace quartet::trainers::pipeline {

const SettingsTable<Settings>& Settings::table() {
  static const SettingsTable<Settings> t = [] {
    using S = Settings;
    SettingsTable<S> t;
    t.add(&S::cuts, "cuts",
          "stage names in model order (quartet list models), each the last of its pipeline stage: P = len(cuts) + 1 "
          "stage processes")
        .at_least(1)
        .needed()
        .names_a("stage");
    t.add(&S::micro_batches, "micro_batches",
          "micro-batches m per step, batch / m samples each; the batch must split evenly")
        .at_least(1);
    t.add(&S::schedule, "schedule",
          "gpipe (all forwards, then all backwards) or 1f1b (warm-up forwards, then one forward one backward, then "
          "cool-down backwards)")
        .allowed(schedule_names());
    t.add(&S::step_timeout_s, "step_timeout_s",
          "seconds a stage waits for a neighbour before the arm fails, 0.01 to a week (604800)")
        .at_least(kMinTimeoutSeconds)
        .at_most(kMaxTimeoutSeconds);
    return t;
  }();
  return t;
}

std::vector<int> stage_bounds(const std::vector<std::string>& model_stages, const Settings& s) {
  std::vector<int> first{0};
  for (const std::string& cut : s.cuts) {
    const auto it = std::find(model_stages.begin(), model_stages.end(), cut);
    if (it == model_stages.end() || it + 1 == model_stages.end() || (it - model_stages.begin()) + 1 <= first.back())
      throw std::logic_error("pipeline: cut \"" + cut + "\" does not fit the model; the regime's checks were skipped");
    first.push_back(static_cast<int>(it - model_stages.begin()) + 1);
  }
  first.push_back(static_cast<int>(model_stages.size()));
  return first;
}

std::string stage_address_key(const std::string& arm, int64_t stage) {
  return "arm/" + arm + "/pipeline/stage" + std::to_string(stage);
}
std::string stage_token_key(const std::string& arm, int64_t stage) {
  return "arm/" + arm + "/pipeline/stage" + std::to_string(stage) + "/token";
}

namespace {

class Pipeline final : public RegimeOf<Settings> {
 public:
  std::string_view name() const override { return "pipeline"; }
  std::string_view summary() const override {
    return "P stage processes along the model's cuts, m micro-batches a step (GPipe or 1F1B); activations and their "
           "gradients between neighbours";
  }
  CriticalPath critical_path(const std::vector<RoleRecords>& roles) const override {
    return pipeline::critical_path(roles);
  }
  std::string_view cost_model() const override {
    return "a flushed pipeline: each step, every stage takes m+P−1 slots of its own per-micro-batch compute and "
           "sends (activations forward, gradients back), so the slowest stage decides and (P−1)/(m+P−1) of a step "
           "is the bubble; the stages run side by side.";
  }

 protected:
  void complete(Settings& s, const ArmFacts& f, const nlohmann::json&) const override {
    int64_t previous = -1;
    for (size_t i = 0; i < s.cuts.size(); ++i) {
      const std::string field = "cuts[" + std::to_string(i) + "]";
      const int64_t at = f.cut_stage(field, s.cuts[i], "the next pipeline stage", "the last stage");
      if (at <= previous)
        throw SettingsError(f.path + "." + field + ": \"" + s.cuts[i] + "\" does not come after \"" + s.cuts[i - 1] +
                            "\"; cuts name different stages in the model's order: " + f.stage_list());
      previous = at;
    }
    if (f.train.batch % s.micro_batches != 0)
      throw SettingsError(f.path + ".micro_batches: " + std::to_string(s.micro_batches) + " does not divide the batch " +
                          std::to_string(f.train.batch) + "; batches must split evenly");
    if (f.train.clip_grad_norm > 0.0)
      throw SettingsError(f.path + ".train.clip_grad_norm: the pipeline regime does not clip (the norm spans every "
                          "stage); use 0");
    if (f.limits)
      check_limit(f.path + ".cuts", s.stages() - static_cast<int64_t>(f.remote.size()), f.limits->processes,
                  "stage processes on this host", f.limits->basis);
  }
  std::vector<std::string> roles_of(const Settings& s) const override {
    return numbered_roles("stage", s.stages());
  }
  void run(const RoleContext& ctx, const Settings& s) const override { run_stage(ctx, s); }
};

}  // namespace

const Regime& regime() {
  static const Pipeline r;
  return r;
}

}  // namespace quartet::trainers::pipeline

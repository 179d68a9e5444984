#include "experiments/wiring.h"

namespace quartet::experiments {

workloads::WorkloadConfig workload_config(const ExperimentSpec& spec) {
  workloads::WorkloadConfig c;
  c.name = spec.workload.name;
  c.model = spec.workload.model;
  c.data_dir = spec.workload.data_dir;
  c.seed = spec.seed;
  c.train_limit = spec.workload.train_samples;
  c.test_limit = spec.workload.test_samples;
  c.volumes = spec.workload.volumes;
  c.test_volumes = spec.workload.test_volumes;
  c.volume_size = spec.workload.volume_size;
  c.patch = spec.workload.patch;
  return c;
}

workloads::WorkloadConfig workload_config(const ExperimentSpec& spec, const ArmSpec& arm) {
  workloads::WorkloadConfig c = workload_config(spec);
  if (arm.patch > 0) c.patch = arm.patch;
  return c;
}

std::filesystem::path initial_weights_path(const std::filesystem::path& run_dir, const ExperimentSpec& spec,
                                           const ArmSpec& arm) {
  if (arm.model == spec.workload.model) return run_dir / "init.safetensors";
  return run_dir / ("init-" + arm.model + ".safetensors");
}

trainers::TrainConfig train_config(const ExperimentSpec& spec, const ArmSpec& arm) {
  trainers::TrainConfig c;
  const TrainSpec& t = arm.train;
  c.epochs = t.epochs;
  c.batch = t.batch;
  c.micro_batches = arm.micro_batches;
  c.ranks = arm.ranks;
  c.eval_batch = t.eval_batch;
  c.max_steps = t.max_steps;
  c.checkpoint = t.checkpoint;
  c.target = t.target;
  const OptimizerSpec& o = t.optimizer;
  c.optimizer = {o.name,
                 static_cast<float>(o.lr),
                 static_cast<float>(o.momentum),
                 o.nesterov,
                 static_cast<float>(o.weight_decay),
                 static_cast<float>(o.beta1),
                 static_cast<float>(o.beta2),
                 static_cast<float>(o.eps)};
  const ScheduleSpec& s = t.schedule;
  c.schedule = {s.name,         s.step_size,
                static_cast<float>(s.gamma), static_cast<float>(s.min_lr),
                s.warmup_steps, static_cast<float>(s.warmup_start_factor),
                s.scale_base_batch};
  c.clip_grad_norm = t.clip_grad_norm;
  c.seed = spec.seed;
  // The arm's own fields (defaults filled by parse_spec): multi-process regimes size
  // their roles from them.
  if (spec.json.contains("arms"))
    for (const auto& a : spec.json.at("arms"))
      if (a.value("name", "") == arm.name) c.arm_settings = a;
  return c;
}

namespace {

std::unique_ptr<workloads::Workload> load(const workloads::WorkloadConfig& config) {
  try {
    return workloads::make_workload(config);
  } catch (const std::invalid_argument& e) {
    throw InputError(std::string("spec.workload: ") + e.what());
  } catch (const std::runtime_error& e) {
    throw InputError(e.what());
  }
}

}  // namespace

std::unique_ptr<workloads::Workload> load_workload(const ExperimentSpec& spec) { return load(workload_config(spec)); }

std::unique_ptr<workloads::Workload> load_workload(const ExperimentSpec& spec, const ArmSpec& arm) {
  return load(workload_config(spec, arm));
}

}  // namespace quartet::experiments

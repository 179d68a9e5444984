#pragma once

// The experiment file (docs/spec.md): a workload, a seed, training settings, and arms
// (regime + settings) that override the experiment-level fields.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "experiments/schema.h"

namespace quartet::experiments {

struct OptimizerSpec {
  std::string name = "sgd";
  double lr = 0.05;
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

struct ScheduleSpec {
  std::string name = "constant";
  int64_t step_size = 1;
  double gamma = 0.1;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  double warmup_start_factor = 1.0 / 3.0;
  int64_t scale_base_batch = 0;
};

struct TrainSpec {
  int64_t epochs = 1;
  int64_t batch = 64;  // samples behind one optimizer step of the global model
  std::optional<double> target;  // quality to reach (accuracy)
  OptimizerSpec optimizer;
  ScheduleSpec schedule;
  double clip_grad_norm = 0.0;  // 0: off
  int64_t eval_batch = 1000;
  int64_t max_steps = 0;  // 0: no limit; a cap for quick runs and tests
  bool checkpoint = false;  // activation checkpointing per model stage
};

struct WorkloadSpec {
  std::string name;
  std::string model;
  std::string data_dir;        // empty: the workload's default
  int64_t train_samples = 0;   // 0: the whole training set
  int64_t test_samples = 0;    // 0: the whole test set
  // Volume workloads only (workloads/segmentation.h); filled when absent.
  int64_t volumes = 20;        // phantoms made, test ones included; msd-folder: first cases, 0 all
  int64_t test_volumes = 4;    // the last ones, held out
  int64_t volume_size = 32;    // voxels per side (phantoms)
  int64_t patch = 32;          // voxels per side of a training patch and an inference window
};

struct ArmSpec {
  std::string name;
  std::string regime;
  std::string model;          // the arm's own `model`, else the workload's
  int64_t patch = 0;          // volume workloads: the arm's own patch; 0: the workload's
  int64_t micro_batches = 1;  // accumulate; data_parallel: per rank
  TrainSpec train;
  // data_parallel (docs/data_parallel.md)
  int ranks = 1;
  std::string backend = "gloo";  // gloo (CPU); nccl is refused by a build without CUDA
  double bucket_mb = 25.0;       // gradient bucket size, MiB (DDP's default)
  bool sync_bn = false;
  int zero = 0;                  // 1: shard optimizer state; 2: also gradients
  std::string compress = "none"; // none, fp16
  int threads = 0;  // 0: cores / processes of the arm
  std::string device = "cpu";
  std::vector<std::string> remote;  // roles started on other hosts (quartet role --coordinator)
};

struct ExperimentSpec {
  std::string name;
  WorkloadSpec workload;
  uint64_t seed = 1;
  std::vector<ArmSpec> arms;
  nlohmann::json json;  // the spec with every default filled in: what was run

  const ArmSpec& arm(const std::string& name) const;  // throws SpecError when absent
};

// The schema behind validation and `quartet schema`.
const Field& spec_schema();

// Validates (SpecError naming the field) and fills defaults.
ExperimentSpec parse_spec(nlohmann::json j);
// An experiment file's JSON (// and /* */ comments allowed), not yet validated;
// SpecError naming the file when it cannot be read or is not JSON.
nlohmann::json read_spec_json(const std::string& path);
// read_spec_json, then parse_spec; SpecError naming the file when unreadable or invalid.
ExperimentSpec load_spec_file(const std::string& path);

}  // namespace quartet::experiments

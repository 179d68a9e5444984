#pragma once

// Turns a parsed spec into the settings of the layers below.

#include <filesystem>
#include <optional>

#include "runner/spec.h"
#include "trainers/regime.h"
#include "workloads/workload.h"

namespace quartet::runner {

workloads::WorkloadConfig workload_config(const ExperimentSpec& spec);
// The workload as one arm sees it: the experiment's, with the arm's own model and patch.
workloads::WorkloadConfig workload_config(const ExperimentSpec& spec, const ArmSpec& arm);

// The weights an arm starts from, in the run folder: init.safetensors for the workload's
// model (from the seed, or --init), init-<model>.safetensors for an arm with its own.
std::filesystem::path initial_weights_path(const std::filesystem::path& run_dir, const ExperimentSpec& spec,
                                           const ArmSpec& arm);
// The context a role of `arm` runs in (everything but the role, its rank, the workload
// and the connections, which the role process fills in).
trainers::RoleContext role_context(const ArmSpec& arm, const std::filesystem::path& run_dir,
                                   const ExperimentSpec& spec);

// Loads the workload; a missing or corrupt dataset becomes a SpecError-like InputError.
std::unique_ptr<workloads::Workload> load_workload(const ExperimentSpec& spec);
std::unique_ptr<workloads::Workload> load_workload(const ExperimentSpec& spec, const ArmSpec& arm);
// load_workload(spec)->train_size() without making the samples made from the seed
// (workloads::train_size_of); the same InputErrors.
int64_t workload_train_size(const ExperimentSpec& spec);

// The workload and model an arm's weights were trained with, from the run folder they sit
// in (RUN/ARM/final.safetensors or its checkpoint); nullopt when they are not in one.
// `where` names the spec and the arm.
std::optional<workloads::WorkloadConfig> recorded_workload(const std::string& weights, std::string& where);

// Bad input that is not a spec field: a file, a folder, an argument. Exit code 2.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace quartet::runner

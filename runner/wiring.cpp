#include "runner/wiring.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "workloads/onnx/model.h"

namespace quartet::runner {

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
  c.scanners = spec.workload.scanners;
  return c;
}

workloads::WorkloadConfig workload_config(const ExperimentSpec& spec, const ArmSpec& arm) {
  workloads::WorkloadConfig c = workload_config(spec);
  if (!arm.model.empty()) c.model = arm.model;  // text-lm: windows as long as the model reads
  if (arm.patch > 0) c.patch = arm.patch;
  return c;
}

namespace {

// A model's name as part of a file name: an ONNX model's is a path, so its file's stem
// and a hash of the whole path (FNV-1a: the same in every build) stand for it.
std::string file_name_part(const std::string& model) {
  if (!workloads::onnx::is_onnx_model(model)) return model;
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : model) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return "onnx-" + std::filesystem::path(model.substr(std::strlen(workloads::onnx::kPrefix))).stem().string() + "-" +
         hex;
}

}  // namespace

std::filesystem::path initial_weights_path(const std::filesystem::path& run_dir, const ExperimentSpec& spec,
                                           const ArmSpec& arm) {
  if (arm.model == spec.workload.model) return run_dir / "init.safetensors";
  return run_dir / ("init-" + file_name_part(arm.model) + ".safetensors");
}

trainers::RoleContext role_context(const ArmSpec& arm, const std::filesystem::path& run_dir,
                                   const ExperimentSpec& spec) {
  trainers::RoleContext ctx;
  ctx.arm = arm.name;
  ctx.arm_dir = run_dir / arm.name;
  ctx.init_weights = initial_weights_path(run_dir, spec, arm);
  ctx.model_name = arm.model;
  ctx.config = arm.train;
  ctx.settings = arm.settings;
  ctx.device = arm.device;
  ctx.link = arm.link;
  return ctx;
}

namespace {

// f()'s result; a bad setting or missing data becomes an InputError.
template <class F>
auto as_input_error(F f) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw InputError(std::string("spec.workload: ") + e.what());
  } catch (const std::runtime_error& e) {
    throw InputError(e.what());
  }
}

std::unique_ptr<workloads::Workload> load(const workloads::WorkloadConfig& config) {
  return as_input_error([&] { return workloads::make_workload(config); });
}

}  // namespace

std::unique_ptr<workloads::Workload> load_workload(const ExperimentSpec& spec) { return load(workload_config(spec)); }

int64_t workload_train_size(const ExperimentSpec& spec) {
  return as_input_error([&] { return workloads::train_size_of(workload_config(spec)); });
}

std::unique_ptr<workloads::Workload> load_workload(const ExperimentSpec& spec, const ArmSpec& arm) {
  return load(workload_config(spec, arm));
}

std::optional<workloads::WorkloadConfig> recorded_workload(const std::string& weights, std::string& where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path arm_dir = fs::absolute(weights, ec).parent_path(), run_dir = arm_dir.parent_path();
  if (ec || !fs::is_regular_file(run_dir / "spec.json", ec)) return std::nullopt;
  try {
    // spec.json: {"spec": the experiment with its defaults, "environment": where it ran}
    const ExperimentSpec spec = parse_spec(read_spec_json((run_dir / "spec.json").string()).at("spec"), false);
    const ArmSpec& arm = spec.arm(arm_dir.filename().string());
    workloads::WorkloadConfig cfg = workload_config(spec, arm);
    cfg.model = arm.model;
    where = (run_dir / "spec.json").string() + ", arm " + arm.name;
    return cfg;
  } catch (const std::exception&) {
    return std::nullopt;  // not a run folder this build can read: the options must say it
  }
}

}  // namespace quartet::runner

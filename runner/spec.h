#pragma once

// The experiment file (docs/spec.md): a workload, a seed, training settings, and arms
// (a regime and its settings) that override the experiment-level fields. The regimes'
// own fields come from the regime table (trainers/regime.h): this parser knows none of
// them by name, and hands each arm's regime its fields to parse into typed settings.

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/device.h"
#include "trainers/regime.h"
#include "trainers/settings/schema.h"
#include "trainers/train_config.h"

namespace quartet::runner {

// A spec the user wrote is wrong: the message names the field path ("spec.arms[2].batch").
using SpecError = trainers::SettingsError;

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
  int64_t scanners = 1;        // phantoms: volume i on scanner i mod scanners
};

struct ArmSpec {
  std::string name;
  std::string regime;
  std::string model;          // the arm's own `model`, else the workload's
  int64_t patch = 0;          // volume workloads: the arm's own patch; 0: the workload's
  trainers::TrainConfig train;  // the experiment's train fields patched by the arm's; seed: the experiment's
  std::shared_ptr<const trainers::RegimeSettings> settings;  // the regime's own fields, typed
  int threads = 0;            // 0: cores / processes of the arm
  engine::Device device;
  std::string link = "loopback";    // transport/link.h preset for the arm's Asio traffic
  std::vector<std::string> remote;  // roles started on other hosts (quartet role --coordinator)

  const trainers::Regime& regime_entry() const { return trainers::find_regime(regime); }
  // The regime's settings as their own type; throws std::invalid_argument for another regime's.
  template <class S>
  const S& settings_as() const {
    if (const auto* s = dynamic_cast<const S*>(settings.get())) return *s;
    throw std::invalid_argument("arm " + name + ": its settings are not of the type asked for (regime " + regime + ")");
  }
};

// The most repeats a spec may ask for: each repeat runs every arm again.
constexpr int kMaxRepeats = 20;

struct ExperimentSpec {
  std::string name;
  WorkloadSpec workload;
  uint64_t seed = 1;
  int repeats = 1;  // runs of every arm; repeat k with seed + k - 1 (analysis/repeats.h)
  std::vector<ArmSpec> arms;
  nlohmann::json json;  // the spec with every default filled in: what was run

  const ArmSpec& arm(const std::string& name) const;  // throws SpecError when absent
};

// The experiment's fields, the arms' common ones included (the regimes' own fields are
// the regime table's).
const trainers::Field& spec_schema();
// The whole experiment file as JSON Schema (draft 2020-12): `quartet schema`,
// docs/spec.schema.json, the GUI's form. Each regime's fields sit in an if/then branch
// on the arm's `regime`.
nlohmann::json spec_json_schema();
// The fields as Markdown tables: the experiment's, every arm's, then each regime's
// (`quartet schema --markdown`, docs/spec.md).
std::string spec_markdown();

// Validates (SpecError naming the field) and fills defaults. With `machine_limits`, an arm
// that would start more processes, threads or clients than this machine's limits is
// refused unless it overrides them; a role, started by a launcher that checked them,
// parses without.
ExperimentSpec parse_spec(nlohmann::json j, bool machine_limits = true);
// A JSON library error as a person reads it: "line 2, column 1: syntax error while parsing
// object key - unexpected end of input; expected string literal", without the library's
// "[json.exception.parse_error.101] parse error at" prefix.
std::string json_error_text(const nlohmann::json::exception& e);

// An experiment file's JSON (// and /* */ comments allowed), not yet validated;
// SpecError naming the file when it cannot be read or is not JSON.
nlohmann::json read_spec_json(const std::string& path);
// read_spec_json, then parse_spec; SpecError naming the file when unreadable or invalid.
ExperimentSpec load_spec_file(const std::string& path);
// Makes each relative "onnx:PATH" model (the workload's, the arms') absolute, read from
// the folder of the spec file at `spec_path`, as load_spec_file does.
void resolve_onnx_paths(nlohmann::json& j, const std::string& spec_path);

}  // namespace quartet::runner

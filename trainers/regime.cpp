#include "trainers/regime.h"

#include <stdexcept>

#include "trainers/regimes.h"

namespace quartet::trainers {

const std::vector<std::string>& regime_names() {
  static const std::vector<std::string> names{"single", "accumulate", "data_parallel", "federated", "split"};
  return names;
}

std::unique_ptr<Regime> make_regime(const std::string& name) {
  if (name == "single") return make_single();
  if (name == "accumulate") return make_accumulate();
  if (name == "data_parallel") return make_data_parallel();
  if (name == "federated") return make_federated();
  if (name == "split") return make_split();
  std::string known;
  for (const auto& n : regime_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown regime \"" + name + "\"; known regimes: " + known);
}

std::filesystem::path records_path(const std::filesystem::path& arm_dir, const std::string& role) {
  return arm_dir / "roles" / (role + ".jsonl");
}

std::filesystem::path checkpoint_path(const std::filesystem::path& arm_dir) {
  return arm_dir / "checkpoint.safetensors";
}

std::filesystem::path final_weights_path(const std::filesystem::path& arm_dir) {
  return arm_dir / "final.safetensors";
}

}  // namespace quartet::trainers

#include "trainers/regime.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "workloads/models.h"

namespace quartet::trainers {

std::vector<std::string> regime_names() {
  std::vector<std::string> names;
  for (const Regime* r : regime_table()) names.emplace_back(r->name());
  return names;
}

const Regime& find_regime(std::string_view name) {
  for (const Regime* r : regime_table())
    if (r->name() == name) return *r;
  std::string known;
  for (const auto& n : regime_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown regime \"" + std::string(name) + "\"; known regimes: " + known);
}

ArmFacts facts_of(const RoleContext& ctx) {
  ArmFacts f;
  f.path = ctx.arm;
  f.train = ctx.config;
  f.model = ctx.model_name;
  f.stages = workloads::model_info(ctx.model_name).stages;
  f.device = ctx.device;
  f.cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  return f;
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

std::string ArmFacts::stage_list() const {
  std::string known;
  for (const std::string& st : stages) known += (known.empty() ? "\"" : ", \"") + st + "\"";
  return known;
}

int64_t ArmFacts::cut_stage(const std::string& field, const std::string& name, const std::string& who,
                            const std::string& what) const {
  const auto it = std::find(stages.begin(), stages.end(), name);
  if (it == stages.end())
    throw SettingsError(path + "." + field + ": \"" + name + "\" is not a stage of " + model + "; its stages are " +
                        stage_list());
  if (it + 1 == stages.end())
    throw SettingsError(path + "." + field + ": \"" + name + "\" is the last stage, which leaves " + who +
                        " nothing to run; a cut names " + what + " before it, one of " + stage_list());
  return it - stages.begin();
}

std::vector<std::string> numbered_roles(const std::string& prefix, int64_t n) {
  std::vector<std::string> roles;
  for (int64_t i = 0; i < n; ++i) roles.push_back(prefix + std::to_string(i));
  return roles;
}

}  // namespace quartet::trainers

#pragma once

// A regime says how an arm trains the model: its typed settings, the roles it runs, what
// each role does, and how its records read as a critical path for the projection. Each
// regime is one folder under trainers/ and one line in the regime table
// (trainers/regime_table.cpp); the spec parser, `quartet schema`, docs/spec.md, the GUI's
// form and the report all read that table. docs/regimes.md says how to add one.
//
// The launcher (runner/) starts one process per role and hands it a RoleContext;
// nothing in it is raw JSON: the arm's settings arrive parsed and typed.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "engine/device.h"
#include "trainers/cost_model.h"
#include "trainers/limits.h"
#include "trainers/settings/table.h"
#include "trainers/train_config.h"
#include "workloads/workload.h"

namespace quartet::transport {
class CoordinatorClient;
}

namespace quartet::trainers {

// Each regime's typed settings derive from this, so a RoleContext can carry them.
struct RegimeSettings {
  virtual ~RegimeSettings() = default;
};

// What a regime's settings are checked against beyond their own fields: the rest of the arm.
struct ArmFacts {
  std::string path;                 // the arm in messages: "spec.arms[2]"
  TrainConfig train;                // the arm's training settings
  std::string model;                // the model it trains
  std::vector<std::string> stages;  // that model's stage names, in order
  engine::Device device;            // where it trains
  std::vector<std::string> remote;  // roles that join from other hosts
  int64_t cores = 1;                // this machine's, for defaults sized by them
  // What the arm may start on this machine; none: not checked (the arm overrides the
  // limits, or a role starts what its launcher already checked).
  std::optional<MachineLimits> limits;

  // The stage names quoted and comma-separated, for messages: "conv1", "conv2", ...
  std::string stage_list() const;
  // Where the cut `name` (the arm's field `field`) falls: its stage's index. Throws
  // SettingsError for a name that is not a stage, and for the last stage, which would
  // leave `who` nothing to run ("a cut names `what` before it").
  int64_t cut_stage(const std::string& field, const std::string& name, const std::string& who,
                    const std::string& what) const;
};

// "rank0" .. "rank{n-1}": the roles of a regime whose processes are numbered.
std::vector<std::string> numbered_roles(const std::string& prefix, int64_t n);

struct RoleContext {
  std::string arm;
  std::string role;
  int rank = 0;                         // the role's place in Regime::roles()
  // The role's place among its host's processes when a cluster launcher said so
  // (SLURM_LOCALID, LOCAL_RANK: quartet launch); -1: not given.
  int local_rank = -1;
  std::filesystem::path arm_dir;        // results/<run>/<arm>
  std::filesystem::path init_weights;   // the arm's initial weights (every arm of its model alike)
  std::string model_name;               // the arm's model
  TrainConfig config;
  std::shared_ptr<const RegimeSettings> settings;  // the arm's regime settings (Regime::parse)
  engine::Device device;                // where the role computes
  std::string link = "loopback";        // transport/link.h preset for the arm's Asio traffic
  const workloads::Workload* workload = nullptr;
  bool resume = false;                  // continue from <arm_dir>/checkpoint.safetensors if present
  // Also called with every record line the role writes (a remote role forwards them to
  // the coordinator, which files them with the local roles' records).
  std::function<void(const std::string& record)> on_record;
  // This role's connection to the run's coordinator (registered as arm/role, with its
  // rank and the arm's world size): collective bootstrap and rendezvous go through it.
  transport::CoordinatorClient* coordinator = nullptr;
};

class Regime {
 public:
  virtual ~Regime() = default;
  virtual std::string_view name() const = 0;
  // What runs and what crosses the network, in a line (quartet list regimes, docs).
  virtual std::string_view summary() const = 0;
  // The regime's own arm fields, beside the fields every arm has.
  virtual const std::vector<Field>& fields() const = 0;
  // Validates an arm's regime fields (`fields`: an object of only those keys), fills the
  // defaults and checks them against the rest of the arm; throws SettingsError naming
  // facts.path and the field.
  virtual std::shared_ptr<const RegimeSettings> parse(nlohmann::json fields, const ArmFacts& facts) const = 0;
  // Every field with its value: what the arm's spec says after parsing (what ran).
  virtual nlohmann::json to_json(const RegimeSettings& settings) const = 0;
  // The roles an arm of this regime runs, one process each; a role's rank is its index.
  virtual std::vector<std::string> roles(const RegimeSettings& settings) const = 0;
  // Whether the arm fails when this role dies. A regime that tolerates losing a role
  // (federated client pools: their clients miss rounds) says false for it; the launcher
  // then logs the loss and carries on.
  virtual bool essential(const std::string& /*role*/) const { return true; }
  // What a training step of this regime's records counts ("step"; federated: "round").
  virtual std::string_view step_unit() const { return "step"; }
  virtual void run_role(const RoleContext& ctx) const = 0;
  // The cost model of the report's projection: the arm's critical path read from its
  // roles' records (no stages when they lack what it reads), and what that reading
  // assumes, a sentence for the report.
  virtual CriticalPath critical_path(const std::vector<RoleRecords>& roles) const = 0;
  virtual std::string_view cost_model() const = 0;
};

// The regime table: every regime of this build, in the order lists and docs show them.
const std::vector<const Regime*>& regime_table();
std::vector<std::string> regime_names();
// Throws std::invalid_argument listing the known regimes for any other name.
const Regime& find_regime(std::string_view name);

// The facts a role's context gives (no remote roles: a running role does not know them).
ArmFacts facts_of(const RoleContext& ctx);

// A regime with settings of type S (derived from RegimeSettings, with a static table()):
// implements the type-erased half of Regime, so a regime writes only what is its own.
template <class S>
class RegimeOf : public Regime {
 public:
  const std::vector<Field>& fields() const final { return S::table().fields(); }
  std::shared_ptr<const RegimeSettings> parse(nlohmann::json fields, const ArmFacts& facts) const final {
    const nlohmann::json given = fields;
    auto s = std::make_shared<S>(S::table().parse(fields, facts.path));
    complete(*s, facts, given);
    return s;
  }
  nlohmann::json to_json(const RegimeSettings& settings) const final { return S::table().to_json(cast(settings)); }
  std::vector<std::string> roles(const RegimeSettings& settings) const final { return roles_of(cast(settings)); }
  // Settings made in code rather than parsed from a spec get the same checks here.
  void run_role(const RoleContext& ctx) const final {
    if (!ctx.settings) throw std::invalid_argument(std::string(name()) + ": the role has no settings");
    S checked = cast(*ctx.settings);
    complete(checked, facts_of(ctx), nlohmann::json::object());
    engine::set_allow_tf32(ctx.config.precision == "tf32");
    run(ctx, checked);
  }

 protected:
  // Cross-field checks and the defaults that depend on the rest of the arm or on other
  // fields; `given` holds the fields as the spec wrote them, before defaults. Throws
  // SettingsError naming facts.path.
  virtual void complete(S& /*settings*/, const ArmFacts& /*facts*/, const nlohmann::json& /*given*/) const {}
  virtual std::vector<std::string> roles_of(const S& settings) const = 0;
  virtual void run(const RoleContext& ctx, const S& settings) const = 0;

 private:
  const S& cast(const RegimeSettings& settings) const {
    if (const auto* s = dynamic_cast<const S*>(&settings)) return *s;
    throw std::invalid_argument(std::string(name()) + ": settings of another regime (" + typeid(settings).name() + ")");
  }
};

// The role's record file and log inside the arm folder.
std::filesystem::path records_path(const std::filesystem::path& arm_dir, const std::string& role);
std::filesystem::path checkpoint_path(const std::filesystem::path& arm_dir);
std::filesystem::path final_weights_path(const std::filesystem::path& arm_dir);

}  // namespace quartet::trainers

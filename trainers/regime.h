#pragma once

// A regime says which roles an arm runs and what each role does. The launcher
// (experiments/) starts one process per role and hands it a RoleContext.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "trainers/optimizer.h"
#include "workloads/workload.h"

namespace quartet::transport {
class CoordinatorClient;
}

namespace quartet::trainers {

struct TrainConfig {
  int64_t epochs = 1;
  int64_t batch = 64;          // samples behind one optimizer step of the global model
  int64_t micro_batches = 1;   // accumulate, data_parallel (per rank): micro-batches per step
  int ranks = 1;               // data_parallel: processes, each batch / ranks of every batch
  // The arm's regime fields as the spec gives them, defaults filled (federated: clients,
  // processes, ...): roles() sizes multi-process arms from them. Same as RoleContext::arm_settings.
  nlohmann::json arm_settings = nlohmann::json::object();
  int64_t eval_batch = 1000;
  int64_t max_steps = 0;       // 0: no cap
  // Activation checkpointing per stage (engine::Model::set_checkpointing) on every model
  // a role trains.
  bool checkpoint = false;
  std::optional<double> target;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  double clip_grad_norm = 0.0;
  uint64_t seed = 1;           // shuffling (weights come from the arm's initial weights)
};

struct RoleContext {
  std::string arm;
  std::string role;
  int rank = 0;
  std::filesystem::path arm_dir;       // results/<run>/<arm>
  std::filesystem::path init_weights;  // the arm's initial weights (every arm of its model alike)
  std::string model_name;              // the arm's model
  TrainConfig config;
  const workloads::Workload* workload = nullptr;
  bool resume = false;                 // continue from <arm_dir>/checkpoint.safetensors if present
  // Also called with every record line the role writes (a remote role forwards them to
  // the coordinator, which files them with the local roles' records).
  std::function<void(const std::string& record)> on_record;
  // This role's connection to the run's coordinator (registered as arm/role, with its
  // rank and the arm's world size): collective bootstrap and rendezvous go through it.
  transport::CoordinatorClient* coordinator = nullptr;
  // The arm's settings as the spec gives them (regime-specific fields), defaults filled.
  nlohmann::json arm_settings = nlohmann::json::object();
};

class Regime {
 public:
  virtual ~Regime() = default;
  // The roles an arm of this regime runs, one process each.
  virtual std::vector<std::string> roles(const TrainConfig& config) const = 0;
  virtual void run_role(const RoleContext& ctx) const = 0;
  // Whether the arm fails when this role dies. A regime that tolerates losing a role
  // (federated client pools: their clients miss rounds) says false for it; the launcher
  // then logs the loss and carries on.
  virtual bool essential(const std::string& /*role*/) const { return true; }
};

// The regimes this build knows, and a factory that throws std::invalid_argument listing
// them for any other name.
const std::vector<std::string>& regime_names();
std::unique_ptr<Regime> make_regime(const std::string& name);

// The role's record file and log inside the arm folder.
std::filesystem::path records_path(const std::filesystem::path& arm_dir, const std::string& role);
std::filesystem::path checkpoint_path(const std::filesystem::path& arm_dir);
std::filesystem::path final_weights_path(const std::filesystem::path& arm_dir);

}  // namespace quartet::trainers

#include "trainers/federated/federated.h"

#include <algorithm>

#include "trainers/federated/roles.h"
#include "trainers/virtual_clients.h"

namespace quartet::trainers::federated {
namespace {

class Federated final : public RegimeOf<Settings> {
 public:
  std::string_view name() const override { return "federated"; }
  std::string_view summary() const override {
    return "a server and K virtual clients on a pool of processes; FedAvg, FedProx, FedAvgM, FedAdagrad, FedAdam, "
           "FedYogi";
  }
  std::string_view step_unit() const override { return "round"; }
  CriticalPath critical_path(const std::vector<RoleRecords>& roles) const override {
    return federated::critical_path(roles);
  }
  std::string_view cost_model() const override {
    return "per round, the slowest sampled client (download, local training, upload, each client on its own link to "
           "the server), then the server's aggregation; clients that shared a pool process here run on their own "
           "machines in the projection.";
  }
  // A lost pool only costs its clients' updates (left out of rounds by the deadline).
  bool essential(const std::string& role) const override { return role == "server"; }

 protected:
  void complete(Settings& s, const ArmFacts& f, const nlohmann::json& given) const override {
    if (s.strategy != "fedprox") {
      if (given.contains("mu") && s.mu != 0.0)
        throw SettingsError(f.path + ".mu: only the fedprox strategy has a proximal term, this arm's strategy is " +
                            s.strategy);
      s.mu = 0.0;
    }
    if (s.strategy != "fedavgm" && !given.contains("server_momentum")) s.server_momentum = 0.0;
    if (s.min_clients > s.clients)
      throw SettingsError(f.path + ".min_clients: expected at most clients (" + std::to_string(s.clients) + "), got " +
                          std::to_string(s.min_clients));
    complete_server_optimizer(s, f, given);
    if (!s.processes) s.processes = std::min(f.cores, s.clients);
    check_processes(*s.processes, s.clients, f);
  }

  // A field that only some settings use, given other than its default where it means
  // nothing, is refused (a run's spec.json, which roles parse, holds every default).
  static void only_with(const nlohmann::json& given, const ArmFacts& f, const char* field, bool applies,
                        const std::string& who_takes_it, const std::string& this_arm) {
    if (!applies && given.contains(field) && given.at(field) != Settings::table().at(field).default_value)
      throw SettingsError(f.path + "." + field + ": only for " + who_takes_it + ", this arm has " + this_arm);
  }

  static void complete_server_optimizer(Settings& s, const ArmFacts& f, const nlohmann::json& given) {
    const bool fedopt = s.strategy == "fedadagrad" || s.strategy == "fedadam" || s.strategy == "fedyogi";
    const std::string strategy = "strategy " + s.strategy;
    only_with(given, f, "beta1", fedopt, "the strategies fedadagrad, fedadam and fedyogi", strategy);
    only_with(given, f, "beta2", s.strategy == "fedadam" || s.strategy == "fedyogi",
              "the strategies fedadam and fedyogi", strategy);
    only_with(given, f, "tau", fedopt, "the strategies fedadagrad, fedadam and fedyogi", strategy);
    // The adaptive steps are about server_lr per coordinate whatever the update's size, so
    // they want a smaller rate than FedAvgM's (Flower's FedAdam and FedAdagrad: 0.1).
    if (!s.server_lr) s.server_lr = fedopt ? 0.1 : 1.0;
  }

  std::vector<std::string> roles_of(const Settings& s) const override { return server_and_pools(s.pools()); }
  void run(const RoleContext& ctx, const Settings& s) const override {
    if (ctx.role == "server") return run_server(ctx, s);
    return run_pool(ctx, s, pool_index(ctx.role, s.pools(), "federated"));
  }
};

}  // namespace

const Regime& regime() {
  static const Federated r;
  return r;
}

}  // namespace quartet::trainers::federated

#include "trainers/federated/federated.h"

#include <algorithm>

#include "trainers/federated/roles.h"
#include "trainers/virtual_clients.h"

namespace quartet::trainers::federated {
namespace {

// DP-FedAvg's noise is scaled by the clip, so it needs one; delta is a probability below 1.
void check_privacy(const Settings& s, const std::string& path, const nlohmann::json& given) {
  if (s.dp_noise_multiplier > 0.0 && s.dp_clip == 0.0)
    throw SettingsError(path + ".dp_noise_multiplier: noise needs a clip to scale it; give dp_clip > 0 as well");
  if (s.dp_delta >= 1.0)
    throw SettingsError(path + ".dp_delta: expected a number > 0 and < 1, got " + given.at("dp_delta").dump());
}

class Federated final : public RegimeOf<Settings> {
 public:
  std::string_view name() const override { return "federated"; }
  std::string_view summary() const override {
    return "a server and K virtual clients on a pool of processes; FedAvg, FedProx, FedAvgM";
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
    check_privacy(s, f.path, given);
    if (!s.processes) s.processes = std::min(f.cores, s.clients);
    check_processes(*s.processes, s.clients, f);
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

// The federated regime: a server role runs the rounds (trainers/federated/server.cpp), pool
// roles host the virtual clients (trainers/federated/pool.cpp); the strategy
// (trainers/federated/strategy.h) decides whom to ask and how to average. See docs/federated.md.

#include <stdexcept>

#include "trainers/federated/roles.h"
#include "trainers/regimes.h"
#include "trainers/virtual_clients.h"

namespace quartet::trainers {
namespace {

class Federated : public Regime {
 public:
  std::vector<std::string> roles(const TrainConfig& config) const override {
    const federated::FederatedSettings s = federated::federated_settings(config.arm_settings);
    std::vector<std::string> out{"server"};
    for (int64_t p = 0; p < s.processes; ++p) out.push_back("pool" + std::to_string(p));
    return out;
  }

  // A lost pool only costs its clients' updates (left out of rounds by the deadline).
  bool essential(const std::string& role) const override { return role == "server"; }

  void run_role(const RoleContext& ctx) const override {
    const federated::FederatedSettings s = federated::federated_settings(ctx.arm_settings);
    if (ctx.role == "server") return federated::run_server(ctx, s);
    return federated::run_pool(ctx, s, pool_index(ctx.role, s.processes, "federated"));
  }
};

}  // namespace

std::unique_ptr<Regime> make_federated() { return std::make_unique<Federated>(); }

}  // namespace quartet::trainers

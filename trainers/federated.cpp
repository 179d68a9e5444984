// The federated regime: a server role runs the rounds (trainers/fl_server.cpp), pool
// roles host the virtual clients (trainers/fl_pool.cpp); the strategy
// (trainers/fl_strategy.h) decides whom to ask and how to average. See docs/federated.md.

#include <stdexcept>

#include "trainers/fl_roles.h"
#include "trainers/regimes.h"
#include "trainers/virtual_clients.h"

namespace quartet::trainers {
namespace {

class Federated : public Regime {
 public:
  std::vector<std::string> roles(const TrainConfig& config) const override {
    const fl::FederatedSettings s = fl::federated_settings(config.arm_settings);
    std::vector<std::string> out{"server"};
    for (int64_t p = 0; p < s.processes; ++p) out.push_back("pool" + std::to_string(p));
    return out;
  }

  // A lost pool only costs its clients' updates (left out of rounds by the deadline).
  bool essential(const std::string& role) const override { return role == "server"; }

  void run_role(const RoleContext& ctx) const override {
    const fl::FederatedSettings s = fl::federated_settings(ctx.arm_settings);
    if (ctx.role == "server") return fl::run_server(ctx, s);
    return fl::run_pool(ctx, s, pool_index(ctx.role, s.processes, "federated"));
  }
};

}  // namespace

std::unique_ptr<Regime> make_federated() { return std::make_unique<Federated>(); }

}  // namespace quartet::trainers

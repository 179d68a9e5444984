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
  // The noise is scaled to the mean's sensitivity, S / n; a median or Krum has another.
  if (s.dp_clip > 0.0 && s.aggregator != "mean")
    throw SettingsError(path + ".dp_clip: DP-FedAvg's noise is calibrated for aggregator mean, this arm has " +
                        s.aggregator);
}

class Federated final : public RegimeOf<Settings> {
 public:
  std::string_view name() const override { return "federated"; }
  std::string_view summary() const override {
    return "a server and K virtual clients on a pool of processes; FedAvg, FedProx, FedAvgM, FedAdagrad, FedAdam, "
           "FedYogi; mean, median, trimmed-mean or Krum aggregation";
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
  // A lost pool only costs the update of the client it was training; the other pools
  // take its share of later rounds.
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
    complete_aggregator(s, f, given);
    complete_byzantine(s, f, given);
    check_privacy(s, f.path, given);
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
    // FedAdam's bias correction divides by 1 - beta1^t.
    if (s.strategy == "fedadam" && s.beta1 >= 1.0)
      throw SettingsError(f.path + ".beta1: fedadam's bias correction divides by 1 - beta1^t; expected a number in "
                          "[0, 1), got 1");
  }

  static void complete_aggregator(const Settings& s, const ArmFacts& f, const nlohmann::json& given) {
    const std::string aggregator = "aggregator " + s.aggregator;
    only_with(given, f, "trim_fraction", s.aggregator == "trimmed_mean", "the trimmed_mean aggregator", aggregator);
    only_with(given, f, "krum_byzantine", s.aggregator == "krum", "the krum aggregator", aggregator);
    only_with(given, f, "krum_select", s.aggregator == "krum", "the krum aggregator", aggregator);
    // A round asks this many; fewer answer when clients fail, and the round says so then.
    const int64_t n = clients_per_round(s.clients, s.fraction, s.min_clients);
    if (const std::string why = aggregator_misfit(s.aggregator_config(), n); !why.empty())
      throw SettingsError(f.path + "." + why);
    if (s.aggregator == "trimmed_mean" && trimmed_per_side(s.trim_fraction, n) < 1)
      throw SettingsError(f.path + ".trim_fraction: " + nlohmann::json(s.trim_fraction).dump() + " of the " +
                          std::to_string(n) + " clients a round asks trims none; expected at least 1/" +
                          std::to_string(n));
  }

  static void complete_byzantine(const Settings& s, const ArmFacts& f, const nlohmann::json& given) {
    if (s.byzantine_clients >= s.clients)
      throw SettingsError(f.path + ".byzantine_clients: expected fewer than clients (" + std::to_string(s.clients) +
                          "), got " + std::to_string(s.byzantine_clients));
    const std::string none = "byzantine_clients 0";
    only_with(given, f, "byzantine_attack", s.byzantine_clients > 0, "arms with byzantine_clients >= 1", none);
    only_with(given, f, "byzantine_scale", s.byzantine_clients > 0, "arms with byzantine_clients >= 1", none);
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

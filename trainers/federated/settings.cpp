#include <algorithm>

#include "trainers/federated/client.h"
#include "trainers/federated/compress.h"
#include "trainers/federated/federated.h"
#include "trainers/federated/roles.h"
#include "trainers/virtual_clients.h"

namespace quartet::trainers::federated {

const SettingsTable<Settings>& Settings::table() {
  static const SettingsTable<Settings> t = [] {
    using S = Settings;
    SettingsTable<S> t;
    t.add(&S::clients, "clients", "logical clients K, each with its own partition and connection").at_least(1);
    t.add(&S::fraction, "fraction", "fraction C of the clients sampled each round (seeded)").above(0.0).at_most(1.0);
    t.add(&S::local_epochs, "local_epochs", "local epochs E per round, at the train batch").at_least(1);
    t.add(&S::rounds, "rounds", "communication rounds; at most a million, a run that ends").at_least(1).at_most(kMaxRounds);
    t.add(&S::partition, "partition", "how the training set is split among the clients", partition_table());
    t.add(&S::strategy, "strategy", "how the server combines updates").allowed(strategy_names());
    t.add(&S::mu, "mu", "fedprox: weight of the proximal term (mu/2)||w - w_global||^2; other strategies take none")
        .at_least(0.0)
        .applies_when("strategy", {"fedprox"});
    t.add(&S::server_momentum, "server_momentum", "fedavgm: server momentum beta; other strategies: 0")
        .at_least(0.0)
        .at_most(1.0)
        .applies_when("strategy", {"fedavgm"});
    t.add(&S::server_lr, "server_lr",
          "server learning rate eta of fedavgm (default 1.0) and fedadagrad, fedadam, fedyogi (default 0.1)")
        .above(0.0)
        .at_most(kMaxLr)
        .applies_when("strategy", {"fedavgm", "fedadagrad", "fedadam", "fedyogi"});
    t.add(&S::beta1, "beta1", "fedadagrad, fedadam, fedyogi: server momentum of the pseudo-gradient")
        .at_least(0.0)
        .at_most(1.0)
        .applies_when("strategy", {"fedadagrad", "fedadam", "fedyogi"});
    t.add(&S::beta2, "beta2", "fedadam, fedyogi: decay of the second moment")
        .at_least(0.0)
        .at_most(1.0)
        .applies_when("strategy", {"fedadam", "fedyogi"});
    t.add(&S::tau, "tau", "fedadagrad, fedadam, fedyogi: adaptivity tau, added to sqrt(v)")
        .above(0.0)
        .applies_when("strategy", {"fedadagrad", "fedadam", "fedyogi"});
    t.add(&S::aggregator, "aggregator",
          "how the round's client weights are combined before the strategy: mean (sample-weighted, FedAvg's), "
          "median, trimmed_mean or krum (robust to corrupted updates)")
        .allowed(aggregator_names());
    t.add(&S::trim_fraction, "trim_fraction",
          "trimmed_mean: fraction of the round's clients dropped at each end, per coordinate")
        .at_least(0.0)
        .at_most(0.5)
        .applies_when("aggregator", {"trimmed_mean"});
    t.add(&S::krum_byzantine, "krum_byzantine", "krum: Byzantine clients f tolerated; a round needs more than 2f + 2")
        .at_least(0)
        .applies_when("aggregator", {"krum"});
    t.add(&S::krum_select, "krum_select", "krum: clients m of lowest score averaged (1: Krum, more: multi-Krum)")
        .at_least(1)
        .applies_when("aggregator", {"krum"});
    t.add(&S::byzantine_clients, "byzantine_clients",
          "clients 0 .. k-1 send corrupted updates (an attack to test aggregators against); fewer than clients")
        .at_least(0);
    t.add(&S::byzantine_attack, "byzantine_attack",
          "sign_flip: global - s (w - global); scale: global + s (w - global), s = byzantine_scale")
        .allowed(byzantine_attacks());
    t.add(&S::byzantine_scale, "byzantine_scale", "the attack's factor s");
    t.add(&S::deadline_s, "deadline_s",
          "seconds a round waits for its clients, 0.01 to a week (604800); later updates are left out")
        .at_least(kMinTimeoutSeconds)
        .at_most(kMaxTimeoutSeconds);
    t.add(&S::min_clients, "min_clients", "fewest updates a round averages (else it keeps the weights); <= clients")
        .at_least(1);
    t.add(&S::processes, "processes",
          "pool processes hosting the virtual clients, at most clients; default min(cores, clients)")
        .at_least(1);
    t.add(&S::compress, "compress", "encoding of client updates").allowed(codec_names());
    t.add(&S::topk_fraction, "topk_fraction", "compress topk: fraction of the update's values sent")
        .above(0.0)
        .at_most(1.0)
        .applies_when("compress", {"topk"});
    t.add(&S::dp_clip, "dp_clip",
          "DP-FedAvg: L2 bound S on each client's update (clipped at the server); 0: no differential privacy")
        .at_least(0.0);
    t.add(&S::dp_noise_multiplier, "dp_noise_multiplier",
          "DP-FedAvg: noise multiplier z; the unweighted mean of n clipped updates gets Gaussian noise of std z S / n")
        .at_least(0.0);
    t.add(&S::dp_delta, "dp_delta", "DP-FedAvg: the delta at which the rounds' epsilon is accounted, < 1")
        .above(0.0);
    return t;
  }();
  return t;
}

std::string server_address_key(const std::string& arm) { return "arm/" + arm + "/fl/server"; }
std::string server_token_key(const std::string& arm) { return "arm/" + arm + "/fl/token"; }

}  // namespace quartet::trainers::federated

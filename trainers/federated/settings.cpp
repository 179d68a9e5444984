#include <algorithm>
#include <stdexcept>
#include <thread>

#include "trainers/federated/compress.h"
#include "trainers/federated/roles.h"
#include "trainers/virtual_clients.h"

namespace quartet::trainers::federated {

FederatedSettings federated_settings(const nlohmann::json& arm) {
  FederatedSettings s;
  auto bad = [](const std::string& field, const std::string& what) {
    return std::invalid_argument("federated arm: " + field + ": " + what);
  };
  s.clients = arm.value("clients", s.clients);
  if (s.clients < 1) throw bad("clients", "expected >= 1");
  s.fraction = arm.value("fraction", s.fraction);
  if (!(s.fraction > 0.0 && s.fraction <= 1.0)) throw bad("fraction", "expected 0 < fraction <= 1");
  s.local_epochs = arm.value("local_epochs", s.local_epochs);
  if (s.local_epochs < 1) throw bad("local_epochs", "expected >= 1");
  s.rounds = arm.value("rounds", s.rounds);
  if (s.rounds < 1) throw bad("rounds", "expected >= 1");
  s.partition = partition_spec(arm, s.clients);
  s.strategy.name = arm.value("strategy", s.strategy.name);
  s.strategy.mu = arm.value("mu", s.strategy.mu);
  s.strategy.server_momentum = arm.value("server_momentum", s.strategy.server_momentum);
  s.strategy.server_lr = arm.value("server_lr", s.strategy.server_lr);
  s.deadline_s = arm.value("deadline_s", s.deadline_s);
  if (!(s.deadline_s > 0.0)) throw bad("deadline_s", "expected > 0");
  s.min_clients = arm.value("min_clients", s.min_clients);
  if (s.min_clients < 1 || s.min_clients > s.clients) throw bad("min_clients", "expected 1 <= min_clients <= clients");
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  s.processes = arm.value("processes", std::min(cores, s.clients));
  if (s.processes < 1) throw bad("processes", "expected >= 1");
  s.processes = std::min(s.processes, s.clients);  // an empty pool would have nothing to do
  s.compress = arm.value("compress", s.compress);
  const auto codecs = codec_names();
  if (std::find(codecs.begin(), codecs.end(), s.compress) == codecs.end())
    throw bad("compress", "expected none, fp16 or topk, got \"" + s.compress + "\"");
  s.topk_fraction = arm.value("topk_fraction", s.topk_fraction);
  if (!(s.topk_fraction > 0.0 && s.topk_fraction <= 1.0)) throw bad("topk_fraction", "expected 0 < f <= 1");
  s.link = arm.value("link", s.link);
  s.join_timeout_s = arm.value("join_timeout_s", s.join_timeout_s);
  return s;
}

std::string server_address_key(const std::string& arm) { return "arm/" + arm + "/fl/server"; }
std::string server_token_key(const std::string& arm) { return "arm/" + arm + "/fl/token"; }

}  // namespace quartet::trainers::federated

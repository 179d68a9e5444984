// The split regime's settings, the cut, traffic accounting, and the regime object; the
// server is trainers/split/server.cpp and the client pools trainers/split/client.cpp.

#include "trainers/split/split.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "trainers/regimes.h"
#include "trainers/virtual_clients.h"

namespace quartet::trainers::split {

std::vector<std::string> variant_names() { return {"vanilla", "ushaped", "splitfed"}; }
std::vector<std::string> server_halves_names() { return {"per_client", "shared"}; }

namespace {

bool one_of(const std::string& v, const std::vector<std::string>& allowed) {
  return std::find(allowed.begin(), allowed.end(), v) != allowed.end();
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

SplitSettings split_settings(const nlohmann::json& arm) {
  SplitSettings s;
  auto bad = [](const std::string& field, const std::string& what) {
    return std::invalid_argument("split arm: " + field + ": " + what);
  };
  s.clients = arm.value("clients", s.clients);
  if (s.clients < 1) throw bad("clients", "expected >= 1");
  s.variant = arm.value("variant", s.variant);
  if (!one_of(s.variant, variant_names()))
    throw bad("variant", "expected one of " + joined(variant_names()) + ", got \"" + s.variant + "\"");
  if (s.variant == "ushaped") {
    if (!arm.contains("cuts") || !arm.at("cuts").is_array() || arm.at("cuts").size() != 2)
      throw bad("cuts", "the ushaped variant needs two stage names, cuts: [a, b]");
    s.cuts = arm.at("cuts").get<std::vector<std::string>>();
  } else {
    if (!arm.contains("cut") || !arm.at("cut").is_string())
      throw bad("cut", "the " + s.variant + " variant needs cut: a stage name (quartet list models)");
    s.cuts = {arm.at("cut").get<std::string>()};
  }
  s.server_halves = arm.value("server_halves", s.server_halves);
  if (!one_of(s.server_halves, server_halves_names()))
    throw bad("server_halves", "expected one of " + joined(server_halves_names()) + ", got \"" + s.server_halves + "\"");
  s.partition = partition_spec(arm, s.clients);
  // Vanilla and U-shaped clients take turns, so one pool serves them all; SplitFed's run
  // at once, one pool per core.
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  s.processes = arm.value("processes", s.variant == "splitfed" ? std::min(cores, s.clients) : int64_t{1});
  if (s.processes < 1) throw bad("processes", "expected >= 1");
  s.processes = std::min(s.processes, s.clients);
  s.link = arm.value("link", s.link);
  s.join_timeout_s = arm.value("join_timeout_s", s.join_timeout_s);
  s.step_timeout_s = arm.value("step_timeout_s", s.step_timeout_s);
  if (!(s.step_timeout_s > 0.0)) throw bad("step_timeout_s", "expected > 0");
  return s;
}

std::vector<int> Cut::client_stages() const {
  std::vector<int> out;
  for (int i = 0; i < lower; ++i) out.push_back(i);
  if (ushaped)
    for (int i = upper; i < stages; ++i) out.push_back(i);
  return out;
}

std::vector<int> Cut::server_stages() const {
  std::vector<int> out;
  for (int i = lower; i < upper; ++i) out.push_back(i);
  return out;
}

Cut resolve_cut(const engine::Model& model, const SplitSettings& s) {
  std::string names;
  for (const auto& n : model.stage_names()) names += (names.empty() ? "" : ", ") + n;
  auto index = [&](const std::string& name) {
    const auto& v = model.stage_names();
    const auto it = std::find(v.begin(), v.end(), name);
    if (it == v.end())
      throw std::invalid_argument("split: cut \"" + name + "\" is not a stage of the model; its stages are " + names);
    return static_cast<int>(it - v.begin());
  };
  Cut c;
  c.stages = model.num_stages();
  if (s.cuts.empty()) throw std::invalid_argument("split: no cut; name a stage of the model (" + names + ")");
  // A cut names the last stage before it: the client runs up to and including it.
  c.lower = index(s.cuts[0]) + 1;
  c.upper = c.stages;
  if (s.cuts.size() == 2) {
    c.ushaped = true;
    c.upper = index(s.cuts[1]) + 1;
    if (c.upper <= c.lower || c.upper >= c.stages)
      throw std::invalid_argument("split: cuts [\"" + s.cuts[0] + "\", \"" + s.cuts[1] +
                                  "\"] must be in stage order with a server stage between them and a client stage "
                                  "after the second (stages: " + names + ")");
  }
  if (c.lower >= c.stages)
    throw std::invalid_argument("split: cut \"" + s.cuts[0] +
                                "\" is the last stage, which would leave the server nothing to run; the cut names the "
                                "client's last stage, one of " + names);
  return c;
}

engine::NamedTensors stages_state(engine::Model& model, const std::vector<int>& stages) {
  engine::NamedTensors out;
  for (int i : stages)
    for (auto& [name, t] : model.stage(i).state_dict()) out.emplace_back(model.stage_names()[i] + "." + name, t);
  return out;
}

std::vector<engine::Tensor> stages_parameters(engine::Model& model, const std::vector<int>& stages) {
  std::vector<engine::Tensor> out;
  for (int i : stages)
    for (engine::Tensor& t : model.stage(i).parameters()) out.push_back(t);
  return out;
}

void Traffic::add(const std::string& kind, const transport::Counters& before, const transport::Counters& after) {
  std::lock_guard lock(mutex_);
  Count& c = counts_[kind];
  c.sent += after.bytes_sent - before.bytes_sent;
  c.received += after.bytes_received - before.bytes_received;
  c.messages += (after.messages_sent - before.messages_sent) + (after.messages_received - before.messages_received);
}

void Traffic::merge(const Traffic& other) {
  const auto theirs = other.counts();
  std::lock_guard lock(mutex_);
  for (const auto& [kind, c] : theirs) {
    Count& mine = counts_[kind];
    mine.sent += c.sent;
    mine.received += c.received;
    mine.messages += c.messages;
  }
}

std::map<std::string, Traffic::Count> Traffic::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

Traffic::Count Traffic::total() const {
  Count t;
  for (const auto& [kind, c] : counts()) {
    t.sent += c.sent;
    t.received += c.received;
    t.messages += c.messages;
  }
  return t;
}

nlohmann::json Traffic::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [kind, c] : counts()) j[kind] = {{"sent", c.sent}, {"received", c.received}, {"messages", c.messages}};
  return j;
}

int64_t analytic_turn_bytes(int64_t steps, int64_t batch, int64_t cut_floats_per_sample, int64_t labels_per_sample,
                            int64_t client_half_floats) {
  const int64_t samples = steps * batch;
  return 2 * samples * cut_floats_per_sample * 4 + samples * labels_per_sample * 4 + 2 * client_half_floats * 4;
}

std::string server_address_key(const std::string& arm) { return "arm/" + arm + "/split/server"; }
std::string server_token_key(const std::string& arm) { return "arm/" + arm + "/split/token"; }

namespace {

class Split : public Regime {
 public:
  std::vector<std::string> roles(const TrainConfig& config) const override {
    const SplitSettings s = split_settings(config.arm_settings);
    std::vector<std::string> out{"server"};
    for (int64_t p = 0; p < s.processes; ++p) out.push_back("pool" + std::to_string(p));
    return out;
  }

  // A lost pool costs its clients' turns (the server drops them and goes on).
  bool essential(const std::string& role) const override { return role == "server"; }

  void run_role(const RoleContext& ctx) const override {
    const SplitSettings s = split_settings(ctx.arm_settings);
    if (ctx.role == "server") return run_server(ctx, s);
    return run_pool(ctx, s, pool_index(ctx.role, s.processes, "split"));
  }
};

}  // namespace

}  // namespace quartet::trainers::split

namespace quartet::trainers {
std::unique_ptr<Regime> make_split() { return std::make_unique<split::Split>(); }
}  // namespace quartet::trainers

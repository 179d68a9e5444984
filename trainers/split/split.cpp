// The split regime's settings, the cut, traffic accounting, and the regime object; the
// server is trainers/split/server.cpp and the client pools trainers/split/client.cpp.

#include "trainers/split/split.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "trainers/virtual_clients.h"

namespace quartet::trainers::split {

std::vector<std::string> variant_names() { return {"vanilla", "ushaped", "splitfed"}; }
std::vector<std::string> server_halves_names() { return {"per_client", "shared"}; }

const SettingsTable<Settings>& Settings::table() {
  static const SettingsTable<Settings> t = [] {
    using S = Settings;
    SettingsTable<S> t;
    t.add(&S::clients, "clients", "logical clients K, each with its own partition and connection").at_least(1);
    t.add(&S::variant, "variant",
          "vanilla (clients in turn), ushaped (labels stay on the client), splitfed (clients in parallel, halves "
          "averaged every epoch)")
        .allowed(variant_names());
    t.add(&S::cut, "cut",
          "vanilla, splitfed: the client's last stage (quartet list models); the server runs the rest")
        .names_a("stage")
        .applies_when("variant", {"vanilla", "splitfed"});
    t.add(&S::cuts, "cuts",
          "ushaped: [a, b]: the client runs the stages up to a and after b, and keeps the labels; the server runs the "
          "stages after a up to b")
        .at_least(2)
        .at_most(2)
        .names_a("stage")
        .applies_when("variant", {"ushaped"});
    t.add(&S::server_halves, "server_halves",
          "splitfed: per_client (SFLv1, server halves averaged; the default) or shared (SFLv2)")
        .allowed(server_halves_names())
        .applies_when("variant", {"splitfed"});
    t.add(&S::partition, "partition", "how the training set is split among the clients", partition_table());
    t.add(&S::processes, "processes",
          "pool processes hosting the virtual clients, at most clients; default 1 (vanilla, ushaped: clients take "
          "turns), splitfed min(cores, clients)")
        .at_least(1);
    t.add(&S::step_timeout_s, "step_timeout_s",
          "seconds a silent client or server may take in a turn before it is dropped, 0.01 to a week (604800)")
        .at_least(kMinTimeoutSeconds)
        .at_most(kMaxTimeoutSeconds);
    return t;
  }();
  return t;
}

std::vector<std::string> Settings::stage_cuts() const {
  if (cuts) return *cuts;
  if (cut) return {*cut};
  return {};
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

Cut resolve_cut(const std::vector<std::string>& stages, const Settings& settings) {
  auto index = [&](const std::string& name) {
    const auto it = std::find(stages.begin(), stages.end(), name);
    if (it == stages.end())
      throw std::logic_error("split: cut \"" + name + "\" is not a stage; the regime's checks were skipped");
    return static_cast<int>(it - stages.begin());
  };
  const std::vector<std::string> cuts = settings.stage_cuts();
  if (cuts.empty()) throw std::logic_error("split: no cut; the regime's checks were skipped");
  Cut c;
  c.stages = static_cast<int>(stages.size());
  // A cut names the last stage before it: the client runs up to and including it.
  c.lower = index(cuts[0]) + 1;
  c.upper = c.stages;
  if (cuts.size() == 2) {
    c.ushaped = true;
    c.upper = index(cuts[1]) + 1;
  }
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

class Split final : public RegimeOf<Settings> {
 public:
  std::string_view name() const override { return "split"; }
  std::string_view summary() const override {
    return "K virtual clients run the model up to a cut, a server the rest; vanilla, U-shaped, SplitFed";
  }
  // A lost pool costs its clients' turns (the server drops them and goes on).
  bool essential(const std::string& role) const override { return role == "server"; }
  CriticalPath critical_path(const std::vector<RoleRecords>& roles) const override {
    return split::critical_path(roles);
  }
  std::string_view cost_model() const override {
    return "vanilla and U-shaped clients take turns, so every turn's client and server compute and traffic "
           "(activations, gradients, labels, the client half handed on) is on the path; SplitFed clients run side "
           "by side and the server serves them one after another.";
  }

 protected:
  void complete(Settings& s, const ArmFacts& f, const nlohmann::json&) const override {
    const std::string known = f.stage_list();
    auto check_stage = [&](const std::string& field, const std::string& name) {
      return f.cut_stage(field, name, "the server", "the client's last stage");
    };
    if (s.variant == "ushaped") {
      if (s.cut) throw SettingsError(f.path + ".cut: the ushaped variant takes cuts: [a, b], not cut");
      if (!s.cuts)
        throw SettingsError(f.path + ".cuts: the ushaped variant needs two stage names, cuts: [a, b], from " + known);
      const auto lo = check_stage("cuts[0]", (*s.cuts)[0]);
      const auto hi = check_stage("cuts[1]", (*s.cuts)[1]);
      if (hi <= lo)
        throw SettingsError(f.path + ".cuts: the second cut must come after the first, with the server's stages "
                            "between");
    } else {
      if (s.cuts) throw SettingsError(f.path + ".cuts: only the ushaped variant takes cuts; use cut");
      if (!s.cut) throw SettingsError(f.path + ".cut: the " + s.variant + " variant needs cut, one of " + known);
      check_stage("cut", *s.cut);
    }
    if (s.server_halves && s.variant != "splitfed")
      throw SettingsError(f.path + ".server_halves: only the splitfed variant keeps server halves per client or "
                          "shared");
    if (s.variant == "splitfed" && !s.server_halves) s.server_halves = "per_client";
    // Vanilla and U-shaped clients take turns, so one pool serves them all; SplitFed's run
    // at once, one pool per core.
    if (!s.processes) s.processes = s.variant == "splitfed" ? std::min(f.cores, s.clients) : int64_t{1};
    check_processes(*s.processes, s.clients, f);
    if (f.train.clip_grad_norm > 0.0)
      throw SettingsError(f.path + ".train.clip_grad_norm: the split regime does not clip (the norm spans both "
                          "sides of the cut); use 0");
  }
  std::vector<std::string> roles_of(const Settings& s) const override { return server_and_pools(s.pools()); }
  void run(const RoleContext& ctx, const Settings& s) const override {
    if (ctx.role == "server") return run_server(ctx, s);
    return run_pool(ctx, s, pool_index(ctx.role, s.pools(), "split"));
  }
};

}  // namespace

const Regime& regime() {
  static const Split r;
  return r;
}

}  // namespace quartet::trainers::split

#include "trainers/records.h"

#include <algorithm>

namespace quartet::trainers {

using nlohmann::json;

const json& member(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

double number(const json& j, const char* key, double fallback) {
  const json& v = member(j, key);
  return v.is_number() ? v.get<double>() : fallback;
}

int64_t integer(const json& j, const char* key, int64_t fallback) {
  const json& v = member(j, key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number()) return static_cast<int64_t>(v.get<double>());
  return fallback;
}

std::string text(const json& j, const char* key, const std::string& fallback) {
  const json& v = member(j, key);
  return v.is_string() ? v.get<std::string>() : fallback;
}

std::string type_problem(const json& j, const char* key, json::value_t want) {
  const json& v = member(j, key);
  if (v.is_null()) return "";
  const bool ok = want == json::value_t::number_float ? v.is_number() : v.type() == want;
  if (ok) return "";
  const char* wanted = want == json::value_t::number_float ? "a number"
                       : want == json::value_t::object     ? "an object"
                       : want == json::value_t::array      ? "an array"
                                                           : "a string";
  return std::string("\"") + key + "\" should be " + wanted + ", got " + v.type_name();
}

RecordView read_record(const json& line) {
  RecordView r;
  r.type = text(line, "type");
  r.role = text(line, "role");
  r.step = integer(line, "step");
  r.epoch = number(line, "epoch");
  r.samples = integer(line, "samples");
  r.wall = number(line, "wall");
  const json& compute = member(line, "compute");
  r.forward = number(compute, "forward");
  r.backward = number(compute, "backward");
  r.optimizer = number(compute, "optimizer");
  r.data = number(line, "data");
  r.comm_exposed = number(line, "comm_exposed");
  r.bytes_sent = integer(line, "bytes_sent");
  r.bytes_received = integer(line, "bytes_received");
  r.messages = integer(line, "messages");
  r.loss = number(line, "loss");
  r.lr = number(line, "lr");
  if (const json& e = member(line, "eval"); e.is_object())
    r.eval = Evaluation{text(e, "metric", "accuracy"), number(e, "value"), integer(e, "samples"), number(e, "seconds")};
  if (const json& mem = member(line, "memory"); mem.is_object()) {
    r.memory.emplace();
    for (const auto& [tag, m] : mem.items())
      (*r.memory)[tag] = {integer(m, "current"), integer(m, "peak"), integer(m, "at_total_peak", -1)};
  }
  if (const json& gpu = member(line, "gpu_memory"); gpu.is_object()) {
    r.gpu_memory.emplace();
    for (const auto& [tag, m] : gpu.items())
      if (m.is_object()) (*r.gpu_memory)[tag] = {integer(m, "current"), integer(m, "peak")};
  }
  if (member(line, "rss_peak").is_number()) r.rss_peak = integer(line, "rss_peak");
  return r;
}

std::string record_problem(const json& line) {
  if (!line.is_object()) return std::string("expected a JSON object, got ") + line.type_name();
  if (text(line, "type") != "step") return "";
  for (const char* k : {"wall", "samples", "step"})
    if (!member(line, k).is_number()) return std::string("a step record needs a numeric \"") + k + "\"";
  for (const char* k : {"epoch", "bytes_sent", "bytes_received", "messages", "loss"})
    if (std::string p = type_problem(line, k, json::value_t::number_float); !p.empty()) return p;
  for (const char* k : {"memory", "compute"})
    if (std::string p = type_problem(line, k, json::value_t::object); !p.empty()) return p;
  const json& e = member(line, "eval");
  if (!e.is_null() && (!e.is_object() || !member(e, "value").is_number())) return "\"eval\" needs a numeric \"value\"";
  return "";
}

bool has_steps(const RoleRecords& role) {
  return std::any_of(role.records.begin(), role.records.end(),
                     [](const json& j) { return text(j, "type") == "step"; });
}

namespace {
constexpr const char* kClockRoles[] = {"server", "trainer", "rank0"};
}  // namespace

const RoleRecords* clock_role(const std::vector<RoleRecords>& roles) {
  for (const char* preferred : kClockRoles)
    for (const RoleRecords& r : roles)
      if (r.role == preferred && has_steps(r)) return &r;
  for (const RoleRecords& r : roles)
    if (has_steps(r)) return &r;
  return nullptr;
}

std::string clock_role_name(const std::vector<std::string>& roles) {
  for (const char* preferred : kClockRoles)
    if (std::find(roles.begin(), roles.end(), preferred) != roles.end()) return preferred;
  return roles.empty() ? std::string() : roles.front();
}

}  // namespace quartet::trainers

#include "gui/results_model.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>

#include "experiments/results.h"
#include "gui/json_util.h"

namespace quartet::gui {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ResultsError(path.string() + ": cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    return json::parse(buf.str());
  } catch (const json::parse_error& e) {
    throw ResultsError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

const char* type_name(const json& j) { return j.type_name(); }

// Throws when `key` is present in `j` with a type other than `want`.
void expect_type(const json& j, const char* key, json::value_t want, const std::string& where) {
  const json& v = member(j, key);
  if (v.is_null()) return;
  const bool ok = want == json::value_t::number_float ? v.is_number() : v.type() == want;
  if (!ok) {
    const char* wanted = want == json::value_t::number_float ? "a number"
                         : want == json::value_t::object     ? "an object"
                         : want == json::value_t::array      ? "an array"
                                                             : "a string";
    throw ResultsError(where + ": \"" + key + "\" should be " + wanted + ", got " + type_name(v));
  }
}

void check_summary(const json& s, const fs::path& path) {
  const std::string where = path.string();
  if (!s.is_object()) throw ResultsError(where + ": expected a JSON object, got " + type_name(s));
  for (const char* k : {"samples_per_second", "train_seconds", "wall_seconds", "eval_seconds", "epochs", "samples",
                        "steps"})
    expect_type(s, k, json::value_t::number_float, where);
  for (const char* k : {"memory_peak_bytes", "bytes", "compute_seconds"}) expect_type(s, k, json::value_t::object, where);
  expect_type(s, "evaluations", json::value_t::array, where);
  expect_type(s, "status", json::value_t::string, where);
  if (s.contains("evaluations"))
    for (const json& e : s["evaluations"])
      if (!e.is_object() || !member(e, "value").is_number())
        throw ResultsError(where + ": an entry of \"evaluations\" has no numeric \"value\"");
}

void check_record(const json& r, const fs::path& path, size_t index) {
  const std::string where = path.string() + ": record " + std::to_string(index + 1);
  if (!r.is_object()) throw ResultsError(where + ": expected a JSON object, got " + type_name(r));
  if (text(r, "type") != "step") return;
  for (const char* k : {"wall", "samples", "step"})
    if (!member(r, k).is_number()) throw ResultsError(where + ": a step record needs a numeric \"" + k + "\"");
  for (const char* k : {"epoch", "bytes_sent", "bytes_received", "messages", "loss"})
    expect_type(r, k, json::value_t::number_float, where);
  expect_type(r, "memory", json::value_t::object, where);
  expect_type(r, "compute", json::value_t::object, where);
  const json& e = member(r, "eval");
  if (!e.is_null() && (!e.is_object() || !member(e, "value").is_number()))
    throw ResultsError(where + ": \"eval\" needs a numeric \"value\"");
}

bool plain_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos && s.find('\\') == std::string::npos;
}

std::vector<RoleRecords> read_roles(const fs::path& roles_dir) {
  std::vector<RoleRecords> roles;
  std::error_code ec;
  if (!fs::is_directory(roles_dir, ec)) return roles;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(roles_dir, ec))
    if (entry.path().extension() == ".jsonl") files.push_back(entry.path());
  if (ec) throw ResultsError(roles_dir.string() + ": cannot list: " + ec.message());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    RoleRecords rr;
    rr.role = f.stem().string();
    try {
      rr.records = experiments::read_jsonl(f);
    } catch (const std::exception& e) {
      throw ResultsError(e.what());
    }
    for (size_t i = 0; i < rr.records.size(); ++i) check_record(rr.records[i], f, i);
    roles.push_back(std::move(rr));
  }
  return roles;
}

bool has_steps(const RoleRecords& r) {
  return std::any_of(r.records.begin(), r.records.end(), [](const json& j) { return text(j, "type") == "step"; });
}

}  // namespace

std::string role_kind(const std::string& role) {
  std::string kind = role;
  while (!kind.empty() && std::isdigit(static_cast<unsigned char>(kind.back()))) kind.pop_back();
  return kind.empty() ? role : kind;
}

void ArmResults::add_record(const json& record) {
  const std::string who = text(record, "role", "process");
  for (RoleRecords& r : roles)
    if (r.role == who) {
      r.records.push_back(record);
      return;
    }
  roles.push_back({who, {record}});
}

const RoleRecords* ArmResults::role(const std::string& name) const {
  for (const RoleRecords& r : roles)
    if (r.role == name) return &r;
  return nullptr;
}

const RoleRecords* ArmResults::timeline() const {
  for (const char* preferred : {"server", "trainer", "rank0"})
    if (const RoleRecords* r = role(preferred); r && has_steps(*r)) return r;
  for (const RoleRecords& r : roles)
    if (has_steps(r)) return &r;
  return nullptr;
}

RunResults load_run(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw ResultsError(dir.string() + ": no such folder");
  if (!fs::is_directory(dir, ec)) throw ResultsError(dir.string() + ": not a folder");
  const fs::path spec_path = dir / "spec.json";
  if (!fs::exists(spec_path, ec))
    throw ResultsError(dir.string() + ": not a Quartet run folder (no spec.json; quartet run makes one)");

  RunResults run;
  run.dir = dir;
  const json spec_file = read_json_file(spec_path);
  if (!spec_file.is_object() || !member(spec_file, "spec").is_object())
    throw ResultsError(spec_path.string() + ": expected {\"spec\": {...}, \"environment\": {...}}");
  run.spec = spec_file["spec"];
  run.environment = member(spec_file, "environment");
  run.name = text(run.spec, "name", dir.filename().string());
  const json& arms = member(run.spec, "arms");
  if (!arms.is_array() || arms.empty()) throw ResultsError(spec_path.string() + ": spec.arms should be a non-empty array");

  json run_json;
  if (fs::exists(dir / "run.json", ec)) {
    run_json = read_json_file(dir / "run.json");
    if (!run_json.is_object()) throw ResultsError((dir / "run.json").string() + ": expected a JSON object");
    expect_type(run_json, "status", json::value_t::string, (dir / "run.json").string());
    expect_type(run_json, "arms", json::value_t::object, (dir / "run.json").string());
    run.status = text(run_json, "status", "unknown");
  } else {
    run.status = "unknown";
    run.warnings.push_back((dir / "run.json").string() + ": missing; the run's status is unknown");
  }
  const std::string run_link = text(run.spec, "link", "loopback");

  for (size_t i = 0; i < arms.size(); ++i) {
    const json& a = arms[i];
    const std::string where = spec_path.string() + ": spec.arms[" + std::to_string(i) + "]";
    if (!a.is_object() || !member(a, "name").is_string() || !member(a, "regime").is_string())
      throw ResultsError(where + ": needs a string \"name\" and \"regime\"");
    ArmResults arm;
    arm.name = a["name"].get<std::string>();
    if (!plain_name(arm.name)) throw ResultsError(where + ".name: \"" + arm.name + "\" is not a folder name");
    arm.label = arm.name;
    arm.regime = a["regime"].get<std::string>();
    arm.link = text(a, "link", run_link);
    arm.spec = a;
    const fs::path arm_dir = dir / arm.name;
    arm.status = text(member(run_json, "arms"), arm.name.c_str(), fs::exists(arm_dir, ec) ? "unknown" : "pending");
    const fs::path summary_path = arm_dir / "summary.json";
    if (fs::exists(summary_path, ec)) {
      arm.summary = read_json_file(summary_path);
      check_summary(arm.summary, summary_path);
      arm.status = text(arm.summary, "status", arm.status);
      arm.error = text(arm.summary, "error");
    }
    arm.roles = read_roles(arm_dir / "roles");
    run.arms.push_back(std::move(arm));
  }
  return run;
}

std::vector<EvalPoint> eval_points(const ArmResults& arm) {
  std::vector<EvalPoint> out;
  if (const RoleRecords* t = arm.timeline()) {
    for (const json& r : t->records) {
      if (text(r, "type") != "step" || !member(r, "eval").is_object()) continue;
      out.push_back({integer(r, "step"), integer(r, "samples"), number(r, "epoch"), number(r, "wall"),
                     number(r["eval"], "value")});
    }
    if (!out.empty()) return out;
  }
  const json& evals = member(arm.summary, "evaluations");
  if (evals.is_array())
    for (const json& e : evals)
      out.push_back({integer(e, "step"), integer(e, "samples"), number(e, "epoch"), number(e, "wall"), number(e, "value")});
  return out;
}

std::vector<BytesPoint> cumulative_bytes(const ArmResults& arm) {
  std::vector<BytesPoint> out{{0.0, 0.0}};
  // A hub (federated, split) sees every message as sent or received; elsewhere each
  // message counts once, at its sender.
  if (const RoleRecords* server = arm.role("server"); server && has_steps(*server)) {
    for (const json& r : server->records)
      if (text(r, "type") == "step")
        out.push_back({number(r, "wall"), number(r, "bytes_sent") + number(r, "bytes_received")});
    return out;
  }
  struct Event {
    double wall;
    size_t role;
    double sent;
  };
  std::vector<Event> events;
  for (size_t i = 0; i < arm.roles.size(); ++i)
    for (const json& r : arm.roles[i].records)
      if (text(r, "type") == "step") events.push_back({number(r, "wall"), i, number(r, "bytes_sent")});
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.wall < b.wall; });
  std::vector<double> last(arm.roles.size(), 0.0);
  double total = 0.0;
  for (const Event& e : events) {
    total += e.sent - last[e.role];
    last[e.role] = e.sent;
    out.push_back({e.wall, total});
  }
  return out;
}

double train_seconds(const ArmResults& arm) {
  if (member(arm.summary, "train_seconds").is_number()) return arm.summary["train_seconds"].get<double>();
  const RoleRecords* t = arm.timeline();
  if (!t) return 0.0;
  double wall = 0.0, eval = 0.0;
  for (const json& r : t->records) {
    if (text(r, "type") != "step") continue;
    wall = std::max(wall, number(r, "wall"));
    eval += number(member(r, "eval"), "seconds");
  }
  return std::max(wall - eval, 0.0);
}

int64_t samples_done(const ArmResults& arm) {
  if (member(arm.summary, "samples").is_number()) return integer(arm.summary, "samples");
  int64_t samples = 0;
  if (const RoleRecords* t = arm.timeline())
    for (const json& r : t->records)
      if (text(r, "type") == "step") samples = std::max(samples, integer(r, "samples"));
  return samples;
}

double epochs_done(const ArmResults& arm) {
  if (member(arm.summary, "epochs").is_number()) return number(arm.summary, "epochs");
  double epochs = 0.0;
  if (const RoleRecords* t = arm.timeline())
    for (const json& r : t->records)
      if (text(r, "type") == "step") epochs = std::max(epochs, number(r, "epoch"));
  return epochs;
}

double samples_per_second(const ArmResults& arm) {
  if (member(arm.summary, "samples_per_second").is_number()) return number(arm.summary, "samples_per_second");
  const double t = train_seconds(arm);
  return t > 0 ? static_cast<double>(samples_done(arm)) / t : 0.0;
}

double bytes_per_process_per_epoch(const ArmResults& arm) {
  const json& bytes = member(arm.summary, "bytes");
  if (member(bytes, "per_process_per_epoch").is_number()) return number(bytes, "per_process_per_epoch");
  double total = 0.0;
  int processes = 0;
  for (const RoleRecords& r : arm.roles) {
    double last = 0.0;
    for (const json& rec : r.records)
      if (text(rec, "type") == "step") last = number(rec, "bytes_sent") + number(rec, "bytes_received");
    total += last;
    ++processes;
  }
  const double epochs = epochs_done(arm);
  return processes > 0 && epochs > 0 ? total / processes / epochs : 0.0;
}

std::vector<std::string> memory_tags() {
  return {"parameters", "gradients", "optimizer_state", "activations", "communication", "workspace"};
}

std::vector<ProcessMemory> process_memory(const ArmResults& arm) {
  struct RolePeak {
    std::map<std::string, double> tags;
    double total = 0.0, rss = 0.0;
  };
  std::vector<std::pair<std::string, RolePeak>> per_role;
  for (const RoleRecords& r : arm.roles) {
    RolePeak p;
    bool any = false;
    for (const json& rec : r.records) {
      const json& mem = member(rec, "memory");
      if (mem.is_object()) {
        any = true;
        for (const auto& [tag, m] : mem.items()) {
          const double peak = number(m, "peak");
          if (tag == "total") p.total = std::max(p.total, peak);
          else p.tags[tag] = std::max(p.tags[tag], peak);
        }
      }
      p.rss = std::max(p.rss, number(rec, "rss_peak"));
    }
    if (any) per_role.emplace_back(r.role, std::move(p));
  }
  auto ordered = [](const std::map<std::string, double>& tags) {
    std::vector<std::pair<std::string, double>> out;
    for (const std::string& t : memory_tags()) out.emplace_back(t, tags.count(t) ? tags.at(t) : 0.0);
    for (const auto& [t, v] : tags)
      if (std::find(memory_tags().begin(), memory_tags().end(), t) == memory_tags().end()) out.emplace_back(t, v);
    return out;
  };
  std::vector<ProcessMemory> out;
  if (per_role.empty()) {
    const json& mem = member(arm.summary, "memory_peak_bytes");
    const json& by_tag = member(mem, "by_tag");
    if (!by_tag.is_object()) return out;
    std::map<std::string, double> tags;
    for (const auto& [tag, v] : by_tag.items())
      if (v.is_number()) tags[tag] = v.get<double>();
    out.push_back({"", ordered(tags), number(mem, "rss")});
    return out;
  }
  // One entry per kind of process: the role of that kind with the largest tracked peak.
  std::vector<std::pair<std::string, const RolePeak*>> kinds;
  for (const auto& [role, p] : per_role) {
    const std::string kind = role_kind(role);
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == kind; });
    if (it == kinds.end()) kinds.emplace_back(kind, &p);
    else if (p.total > it->second->total) it->second = &p;
  }
  for (const auto& [kind, p] : kinds) out.push_back({kinds.size() == 1 ? "" : kind, ordered(p->tags), p->rss});
  return out;
}

}  // namespace quartet::gui

#include "analysis/results_model.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>

#include "analysis/repeats.h"
#include "analysis/summary.h"

namespace quartet::analysis {

namespace fs = std::filesystem;
using nlohmann::json;
using trainers::integer;
using trainers::member;
using trainers::number;
using trainers::read_record;
using trainers::RecordView;
using trainers::RoleRecords;
using trainers::StepRecord;
using trainers::text;

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

// Throws when `key` is present in `j` with a type other than `want`.
void expect_type(const json& j, const char* key, json::value_t want, const std::string& where) {
  if (const std::string problem = trainers::type_problem(j, key, want); !problem.empty())
    throw ResultsError(where + ": " + problem);
}

void check_summary(const json& s, const fs::path& path) {
  const std::string where = path.string();
  if (!s.is_object()) throw ResultsError(where + ": expected a JSON object, got " + s.type_name());
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
      rr.records = read_jsonl(f);
    } catch (const std::exception& e) {
      throw ResultsError(e.what());
    }
    for (size_t i = 0; i < rr.records.size(); ++i)
      if (const std::string problem = trainers::record_problem(rr.records[i]); !problem.empty())
        throw ResultsError(f.string() + ": record " + std::to_string(i + 1) + ": " + problem);
    roles.push_back(std::move(rr));
  }
  return roles;
}

// Every step record of `role`, read.
std::vector<RecordView> steps_of(const RoleRecords& role) {
  std::vector<RecordView> out;
  for (const json& line : role.records)
    if (RecordView r = read_record(line); r.is_step()) out.push_back(std::move(r));
  return out;
}

}  // namespace

bool is_partial(const ArmResults& arm) { return arm.status == "interrupted" || arm.status == "failed"; }

std::string shown_label(const ArmResults& arm) {
  const std::string label = arm.label.empty() ? arm.name : arm.label;
  return is_partial(arm) ? label + " (partial)" : label;
}

std::string role_kind(const std::string& role) {
  std::string kind = role;
  while (!kind.empty() && std::isdigit(static_cast<unsigned char>(kind.back()))) kind.pop_back();
  return kind.empty() ? role : kind;
}

void ArmResults::add_record(const json& record) {
  std::string who = read_record(record).role;
  if (who.empty()) who = "process";
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

const RoleRecords* ArmResults::timeline() const { return trainers::clock_role(roles); }

namespace {

// Each arm's evaluations in the run's repeats 2..N (their folders are made before any runs).
void read_repeat_evaluations(RunResults& run) {
  std::error_code ec;
  for (int k = 2; fs::exists(repeat_dir(run.dir, k) / "spec.json", ec); ++k) {
    try {
      const RunResults repeat = load_run(repeat_dir(run.dir, k));
      for (ArmResults& arm : run.arms)
        for (const ArmResults& r : repeat.arms)
          if (r.name == arm.name && r.status == "finished") arm.repeat_evaluations.push_back(eval_points(r));
    } catch (const ResultsError& e) {
      run.warnings.push_back(std::string(e.what()) + " (its evaluations are left out of the charts' mean curves)");
    }
  }
}

}  // namespace

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
  read_repeat_evaluations(run);
  return run;
}

std::vector<EvalPoint> eval_points(const ArmResults& arm) {
  std::vector<EvalPoint> out;
  if (const RoleRecords* t = arm.timeline()) {
    for (const RecordView& r : steps_of(*t))
      if (r.eval) out.push_back({r.step, r.samples, r.epoch, r.wall, r.eval->value});
    if (!out.empty()) return out;
  }
  const json& evals = member(arm.summary, "evaluations");
  if (evals.is_array())
    for (const json& e : evals)
      out.push_back({integer(e, "step"), integer(e, "samples"), number(e, "epoch"), number(e, "wall"), number(e, "value")});
  return out;
}

std::string eval_metric(const ArmResults& arm) {
  if (const RoleRecords* t = arm.timeline())
    for (const json& r : t->records)
      if (const std::string m = text(member(r, "eval"), "metric"); !m.empty()) return m;
  return text(arm.summary, "metric");
}

std::vector<std::pair<int64_t, double>> loss_points(const ArmResults& arm) {
  std::vector<std::pair<int64_t, double>> out;
  const RoleRecords* t = arm.timeline();
  if (!t) return out;
  // Ranks each record the loss of their slice of the batch: their mean is the batch's, as
  // one process records it (rank 0's alone is as noisy as a batch of B/N).
  std::map<int64_t, std::pair<double, int>> by_step;
  if (role_kind(t->role) == "rank")
    for (const RoleRecords& role : arm.roles)
      if (role_kind(role.role) == "rank")
        for (const RecordView& r : steps_of(role))
          if (std::isfinite(r.loss)) {
            auto& [sum, n] = by_step[r.step];
            sum += r.loss;
            ++n;
          }
  for (const RecordView& r : steps_of(*t)) {
    if (!std::isfinite(r.loss)) continue;
    const auto it = by_step.find(r.step);
    out.emplace_back(r.samples, it == by_step.end() ? r.loss : it->second.first / it->second.second);
  }
  return out;
}

std::vector<BytesPoint> cumulative_bytes(const ArmResults& arm) {
  std::vector<BytesPoint> out{{0.0, 0.0}};
  // A hub (federated, split) sees every message as sent or received; elsewhere each
  // message counts once, at its sender.
  if (const RoleRecords* server = arm.role("server"); server && trainers::has_steps(*server)) {
    for (const RecordView& r : steps_of(*server))
      out.push_back({r.wall, static_cast<double>(r.bytes_sent + r.bytes_received)});
    return out;
  }
  struct Event {
    double wall;
    size_t role;
    double sent;
  };
  std::vector<Event> events;
  for (size_t i = 0; i < arm.roles.size(); ++i)
    for (const RecordView& r : steps_of(arm.roles[i]))
      events.push_back({r.wall, i, static_cast<double>(r.bytes_sent)});
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
  for (const RecordView& r : steps_of(*t)) {
    wall = std::max(wall, r.wall);
    if (r.eval) eval += r.eval->seconds;
  }
  return std::max(wall - eval, 0.0);
}

namespace {

// The summary's figure `key`, else (a running arm) the largest `field` of the clock
// role's step records so far.
template <typename T>
T summary_or_latest(const ArmResults& arm, const char* key, T StepRecord::*field) {
  if (const json& v = member(arm.summary, key); v.is_number()) return v.get<T>();
  T latest{};
  if (const RoleRecords* t = arm.timeline())
    for (const RecordView& r : steps_of(*t)) latest = std::max(latest, r.*field);
  return latest;
}

}  // namespace

double wall_seconds(const ArmResults& arm) { return summary_or_latest(arm, "wall_seconds", &StepRecord::wall); }
int64_t samples_done(const ArmResults& arm) { return summary_or_latest(arm, "samples", &StepRecord::samples); }
double epochs_done(const ArmResults& arm) { return summary_or_latest(arm, "epochs", &StepRecord::epoch); }

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
    for (const RecordView& rec : steps_of(r)) last = static_cast<double>(rec.bytes_sent + rec.bytes_received);
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
    std::map<std::string, double> tags;     // each tag's own peak
    std::map<std::string, double> at_peak;  // each tag's bytes when the total peaked
    double total = 0.0, rss = 0.0;
    bool gpu = false, has_at_peak = false;
  };
  std::vector<std::pair<std::string, RolePeak>> per_role;
  for (const RoleRecords& r : arm.roles) {
    RolePeak p;
    bool any = false;
    for (const json& line : r.records) {
      const RecordView rec = read_record(line);
      // A process on a GPU keeps its tensors there: its tags are the GPU's.
      const auto& memory = rec.gpu_memory ? rec.gpu_memory : rec.memory;
      if (memory) {
        any = true;
        p.gpu = p.gpu || rec.gpu_memory.has_value();
        for (const auto& [tag, m] : *memory)
          if (tag != "total") p.tags[tag] = std::max(p.tags[tag], static_cast<double>(m.peak));
        // The breakdown at the largest total peak of the run: where the stack of tags is
        // the total, not the sum of peaks reached at different moments.
        if (const auto total = memory->find("total"); total != memory->end() && total->second.peak > p.total) {
          p.total = static_cast<double>(total->second.peak);
          p.at_peak.clear();
          p.has_at_peak = true;
          for (const auto& [tag, m] : *memory)
            if (tag != "total") {
              if (m.at_total_peak < 0) p.has_at_peak = false;
              p.at_peak[tag] = static_cast<double>(m.at_total_peak);
            }
        }
      }
      p.rss = std::max(p.rss, static_cast<double>(rec.rss_peak.value_or(0)));
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
  for (const auto& [kind, p] : kinds)
    out.push_back({kinds.size() == 1 ? "" : kind, ordered(p->has_at_peak ? p->at_peak : p->tags), p->rss, p->gpu,
                   p->has_at_peak});
  return out;
}

}  // namespace quartet::analysis

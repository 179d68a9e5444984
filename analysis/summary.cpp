#include "analysis/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "analysis/report.h"
#include "trainers/records.h"
#include "trainers/regime.h"
#include "workloads/workload.h"

namespace quartet::analysis {

namespace {

// Whether the regime's steps are rounds (federated), by its entry in the regime table; a
// regime this build does not know counts steps.
bool regime_counts_rounds(const std::string& regime) {
  for (const trainers::Regime* r : trainers::regime_table())
    if (r->name() == regime) return r->step_unit() == "round";
  return false;
}

}  // namespace

using nlohmann::json;

std::vector<json> read_jsonl(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  std::vector<json> out;
  size_t start = 0;
  int64_t line_no = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // a torn last line: the writer died mid-record
    ++line_no;
    if (end > start) {
      try {
        out.push_back(json::parse(text.substr(start, end - start)));
      } catch (const json::parse_error& e) {
        throw std::runtime_error(path.string() + ":" + std::to_string(line_no) + ": not a JSON record: " + e.what());
      }
    }
    start = end + 1;
  }
  return out;
}

json summarize_arm(const std::string& arm, const std::string& regime, const std::vector<std::vector<json>>& roles,
                   std::optional<double> target, int64_t train_samples) {
  json s = {{"arm", arm}, {"regime", regime}, {"processes", roles.size()}};
  int64_t samples = 0, steps = 0, planned = 0;
  double wall = 0.0, eval_seconds = 0.0, forward = 0.0, backward = 0.0, optimizer = 0.0, data = 0.0, comm = 0.0;
  int64_t rss_peak = 0, mem_peak = 0, bytes_sent = 0, bytes_received = 0, messages = 0;
  json tag_peaks = json::object();
  json by_role = json::object();
  json evals = json::array();
  int64_t nonfinite = 0, degraded = 0;
  json first_nonfinite = nullptr, first_degraded = nullptr;
  json privacy = nullptr;  // the last step's privacy account (federated arms with DP)
  json metric = nullptr;   // the first evaluation's
  // Kernel choices measured while the arm ran (a shape the machine's table lacked): its
  // ranks wait for them, so the arm's training time leaves out the most any role spent.
  double tuning = 0.0;
  for (size_t i = 0; i < roles.size(); ++i) {
    int64_t role_sent = 0, role_received = 0;
    double role_tuning = 0.0, process_tuning = 0.0;  // a resumed role's new process counts from 0
    for (const json& line : roles[i]) {
      if (const json& k = trainers::member(line, "kernel_tuning"); k.is_number() && std::isfinite(k.get<double>())) {
        const double now = std::max(0.0, k.get<double>());
        role_tuning += now >= process_tuning ? now - process_tuning : now;
        process_tuning = now;
      }
      const trainers::RecordView r = trainers::read_record(line);
      if (r.is_step()) {
        // JSON has no NaN: a non-finite loss is written as null.
        const json& loss = trainers::member(line, "loss");
        if (line.contains("loss") && (!loss.is_number() || !std::isfinite(loss.get<double>())) && nonfinite++ == 0)
          first_nonfinite = r.step;
        if (const json& why = trainers::member(line, "degraded"); why.is_string() && degraded++ == 0)
          first_degraded = why;
      }
      // Memory counts from every record that carries it, whatever its type: federated
      // pools train in client_round records, not step records.
      if (r.rss_peak || r.memory) {
        json& mine = by_role[r.role.empty() ? "process" + std::to_string(i) : r.role];
        if (mine.is_null()) mine = {{"total", 0}, {"rss", 0}};
        if (r.rss_peak) {
          rss_peak = std::max(rss_peak, *r.rss_peak);
          mine["rss"] = std::max(mine["rss"].get<int64_t>(), *r.rss_peak);
        }
        if (r.memory)
          for (const auto& [tag, m] : *r.memory) {
            if (tag == "total") {
              mem_peak = std::max(mem_peak, m.peak);
              mine["total"] = std::max(mine["total"].get<int64_t>(), m.peak);
            } else {
              tag_peaks[tag] = std::max(tag_peaks.value(tag, int64_t{0}), m.peak);
            }
          }
      }
      if (!r.is_step()) continue;
      if (const json& p = trainers::member(line, "privacy"); p.is_object()) privacy = p;
      planned = std::max(planned, trainers::integer(line, "planned_samples"));
      samples = std::max(samples, r.samples);
      steps = std::max(steps, r.step);
      wall = std::max(wall, r.wall);
      forward += r.forward;
      backward += r.backward;
      optimizer += r.optimizer;
      data += r.data;
      comm += r.comm_exposed;
      role_sent = r.bytes_sent;
      role_received = r.bytes_received;
      messages = std::max(messages, r.messages);
      if (r.eval) {
        if (metric.is_null()) metric = r.eval->metric;
        eval_seconds += r.eval->seconds;
        evals.push_back(
            {{"step", r.step}, {"samples", r.samples}, {"epoch", r.epoch}, {"wall", r.wall}, {"value", r.eval->value}});
      }
    }
    bytes_sent += role_sent;
    bytes_received += role_received;
    tuning = std::max(tuning, role_tuning);
  }
  const double train_seconds = std::max(wall - eval_seconds - tuning, 1e-9);
  const double epochs = train_samples > 0 ? static_cast<double>(samples) / static_cast<double>(train_samples) : 0.0;
  s["steps"] = steps;
  s["samples"] = samples;
  s["epochs"] = epochs;
  s["wall_seconds"] = wall;
  s["eval_seconds"] = eval_seconds;
  s["train_seconds"] = train_seconds;
  s["kernel_tuning_seconds"] = tuning;
  s["samples_per_second"] = samples > 0 ? static_cast<double>(samples) / train_seconds : 0.0;
  s["compute_seconds"] = {{"forward", forward}, {"backward", backward}, {"optimizer", optimizer}, {"data", data}};
  s["comm_exposed_seconds"] = comm;
  s["memory_peak_bytes"] = {{"total", mem_peak}, {"by_tag", tag_peaks}, {"rss", rss_peak}, {"by_role", by_role}};
  s["bytes"] = {{"sent", bytes_sent},
                {"received", bytes_received},
                {"messages", messages},
                {"per_process_per_epoch",
                 epochs > 0 && !roles.empty()
                     ? static_cast<double>(bytes_sent + bytes_received) / static_cast<double>(roles.size()) / epochs
                     : 0.0}};
  s["evaluations"] = evals;
  s["metric"] = metric;
  s["final_quality"] = evals.empty() ? json(nullptr) : evals.back()["value"];
  s["target"] = target ? json(*target) : json(nullptr);
  json reached = nullptr;
  if (target) {
    const bool up = workloads::higher_is_better(metric.is_string() ? metric.get<std::string>() : "");
    for (const json& e : evals) {
      if (const double v = e["value"].get<double>(); up ? v >= *target : v <= *target) {
        reached = {{"step", e["step"]}, {"samples", e["samples"]}, {"wall_seconds", e["wall"]}, {"epoch", e["epoch"]}};
        if (regime_counts_rounds(regime)) reached["rounds"] = e["step"];  // its step is a round
        break;
      }
    }
  }
  s["to_target"] = reached;
  s["nonfinite_loss_steps"] = nonfinite;
  s["first_nonfinite_step"] = first_nonfinite;
  s["degraded_steps"] = degraded;
  // Regimes that can lose work (federated rounds short of clients, split turns lost) say
  // what their steps would have trained had nothing been lost.
  if (planned > 0) {
    s["planned_samples"] = planned;
    s["trained_share"] = static_cast<double>(samples) / static_cast<double>(planned);
  }
  s["privacy"] = privacy;
  s["first_degraded"] = first_degraded;
  return s;
}

std::string arm_status(bool interrupted, std::string& why, const json& summary,
                       const std::vector<std::string>& lost_roles) {
  if (interrupted) return "interrupted";
  if (!why.empty()) return "failed";
  if (summary.value("samples", int64_t{0}) == 0) {
    why = "the arm trained no sample: every step, turn or round it recorded failed (the roles' logs under roles/ say "
          "why)";
    return "failed";
  }
  if (const int64_t n = summary.value("nonfinite_loss_steps", int64_t{0}); n > 0) {
    why = std::to_string(n) + " step" + (n == 1 ? "" : "s") + " with a non-finite loss, the first at step " +
          summary.at("first_nonfinite_step").dump() + ": the weights are not numbers any more";
    return "diverged";
  }
  const int64_t short_steps = summary.value("degraded_steps", int64_t{0});
  if (short_steps > 0 || !lost_roles.empty()) {
    std::string parts;
    const int64_t samples = summary.value("samples", int64_t{0}), planned = summary.value("planned_samples", int64_t{0});
    if (planned > 0) parts = "trained " + std::to_string(samples) + " of " + std::to_string(planned) + " planned samples (" +
                             share_text(summary) + ")";
    if (!lost_roles.empty())
      parts += (parts.empty() ? "" : "; ") + ("lost " + lost_roles.front() + (lost_roles.size() > 1 ? " (and others)" : ""));
    if (short_steps > 0)
      parts += (parts.empty() ? "" : "; ") + std::to_string(short_steps) + " step" + (short_steps == 1 ? "" : "s") +
               " short of clients or turns, the first " + summary.at("first_degraded").get<std::string>();
    why = parts;
    // Less than half the work planned is not a result with some losses: the arm failed.
    if (planned > 0 && samples < planned * kLeastTrainedShare) {
      why += "; less than " + std::to_string(static_cast<int>(kLeastTrainedShare * 100)) + " % of the plan";
      return "failed";
    }
    return "degraded";
  }
  return "finished";
}

std::string share_text(const json& summary) {
  const json& share = trainers::member(summary, "trained_share");
  if (!share.is_number()) return "";
  char text[32];
  std::snprintf(text, sizeof text, "%.0f %%", std::floor(share.get<double>() * 100.0));
  return text;
}

std::string status_text(const json& summary) {
  const std::string status = trainers::text(summary, "status", "finished");
  const std::string share = share_text(summary);
  return status == "degraded" && !share.empty() ? status + " (" + share + " trained)" : status;
}

namespace {

RunResults run_of_summaries(const std::string& run_name, const std::vector<json>& arm_summaries) {
  RunResults run;
  run.name = run_name;
  for (const json& s : arm_summaries) {
    ArmResults arm;
    arm.name = arm.label = trainers::text(s, "arm");
    arm.regime = trainers::text(s, "regime");
    arm.status = trainers::text(s, "status", "finished");
    arm.summary = s;
    run.arms.push_back(std::move(arm));
  }
  return run;
}

}  // namespace

std::string summary_table(const std::string& run_name, const std::vector<json>& arm_summaries) {
  return "# " + run_name + "\n\n" + summary_markdown(run_of_summaries(run_name, arm_summaries));
}

std::string summary_text(const std::string& run_name, const std::vector<json>& arm_summaries, int columns) {
  return run_name + "\n\n" + arms_table_text(run_of_summaries(run_name, arm_summaries).arms, columns);
}

}  // namespace quartet::analysis

#include "gui/run_stream.h"

#include <algorithm>

#include "trainers/records.h"

namespace quartet::gui {

using analysis::ArmResults;
using nlohmann::json;
using trainers::integer;
using trainers::member;
using trainers::text;

RunStream::RunStream(const json& spec) {
  run_.status = "starting";
  if (!spec.is_object()) return;
  run_.spec = spec;
  run_.name = text(spec, "name");
  const std::string run_link = text(spec, "link", "loopback");
  const json& arms = member(spec, "arms");
  if (arms.is_array())
    for (const json& a : arms) {
      ArmResults& r = arm(text(a, "name", "arm"));
      r.regime = text(a, "regime");
      r.link = text(a, "link", run_link);
      r.spec = a;
    }
}

ArmResults& RunStream::arm(const std::string& name) {
  for (ArmResults& a : run_.arms)
    if (a.name == name) return a;
  ArmResults a;
  a.name = a.label = name;
  a.status = "pending";
  run_.arms.push_back(std::move(a));
  return run_.arms.back();
}

void RunStream::keep_ended(const analysis::RunResults& saved) {
  if (run_.dir.empty()) run_.dir = saved.dir;
  for (const ArmResults& a : saved.arms) {
    if (a.status != "finished" && a.status != "degraded" && a.status != "diverged") continue;
    ArmResults& kept = arm(a.name);
    const std::string label = kept.label;
    kept = a;
    kept.label = label;
    kept.total_samples = analysis::samples_done(a);  // its bar stands full
  }
  ++version_;
}

void RunStream::feed(const std::string& line) {
  if (line.find_first_not_of(" \t\r\n") == std::string::npos) return;
  json e;
  try {
    e = json::parse(line);
  } catch (const json::exception&) {
    log_.push_back(line);
    ++version_;
    return;
  }
  const std::string event = text(e, "event");
  if (event.empty()) {
    log_.push_back(line);
  } else if (event == "run_started") {
    run_.dir = text(e, "run_dir");
    run_.status = "running";
  } else if (event == "arm_started") {
    ArmResults& a = arm(text(e, "arm"));
    // With repeats an arm starts once per repeat: the live view follows the one running.
    a.roles.clear();
    a.summary = nullptr;
    a.status = "running";
    a.total_samples = integer(e, "total_samples");
  } else if (event == "step") {
    if (member(e, "record").is_object()) arm(text(e, "arm")).add_record(e["record"]);
  } else if (event == "arm_finished") {
    ArmResults& a = arm(text(e, "arm"));
    a.summary = member(e, "summary");
    a.status = text(a.summary, "status", "finished");
    if (!text(a.summary, "error").empty()) a.error = text(a.summary, "error");
  } else if (event == "error") {
    const std::string who = text(e, "arm"), message = text(e, "message");
    errors_.push_back(who.empty() ? message : who + ": " + message);
    if (!who.empty()) {
      ArmResults& a = arm(who);
      a.error = message;
      if (a.status == "running" || a.status == "pending") a.status = "failed";
    }
  } else if (event == "run_finished") {
    run_.status = text(e, "status", "finished");
    finished_ = true;
  }
  ++version_;
}

void settle(analysis::RunResults& run, int exit_code) {
  const std::string ended = exit_code == 0 ? "finished" : exit_code == 130 ? "interrupted" : "failed";
  if (run.status == "running" || run.status == "starting" || run.status.empty()) run.status = ended;
  for (ArmResults& a : run.arms) {
    if (a.status == "running") a.status = ended;
    if (a.status == "pending" && run.status != "finished") a.status = "not run";
  }
}

double arm_progress(const ArmResults& arm) {
  if (arm.status == "finished" || arm.status == "degraded" || arm.status == "diverged") return 1.0;
  if (arm.total_samples <= 0) return 0.0;
  return std::clamp(static_cast<double>(samples_done(arm)) / static_cast<double>(arm.total_samples), 0.0, 1.0);
}

}  // namespace quartet::gui

#include "analysis/pipeline_view.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

namespace quartet::analysis {

using nlohmann::json;
using trainers::integer;
using trainers::member;
using trainers::number;
using trainers::text;

namespace {

// The step records of a role that carry a pipeline object, in order.
std::vector<const json*> stage_steps(const trainers::RoleRecords& role) {
  std::vector<const json*> out;
  for (const json& r : role.records)
    if (text(r, "type") == "step" && member(r, "pipeline").is_object()) out.push_back(&r);
  return out;
}

std::string percent(double fraction) { return fixed(100.0 * fraction, 1) + " %"; }

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

Replay replay_step(const std::vector<StageTimeline>& lanes) {
  const size_t P = lanes.size();
  for (size_t s = 0; s < P; ++s)
    if (lanes[s].stage != static_cast<int64_t>(s)) return {};
  std::vector<std::map<int64_t, double>> forward_end(P), backward_end(P);
  std::vector<size_t> next(P, 0);
  std::vector<double> free(P, 0.0), busy(P, 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t s = 0; s < P; ++s)
      for (; next[s] < lanes[s].ops.size(); ++next[s]) {
        const TimelineOp& op = lanes[s].ops[next[s]];
        double ready = 0.0;
        if (op.op == "F" || op.op == "B") {
          const bool forward = op.op == "F";
          const bool needs = forward ? s > 0 : s + 1 < P;
          if (needs) {
            const auto& ends = forward ? forward_end[s - 1] : backward_end[s + 1];
            const auto it = ends.find(op.micro);
            if (it == ends.end()) break;
            ready = it->second;
          }
        }
        const double duration = std::max(0.0, op.end - op.start);
        free[s] = std::max(free[s], ready) + duration;
        busy[s] += duration;
        if (op.op == "F") forward_end[s][op.micro] = free[s];
        if (op.op == "B") backward_end[s][op.micro] = free[s];
        progress = true;
      }
  }
  Replay r;
  for (size_t s = 0; s < P; ++s) {
    if (next[s] < lanes[s].ops.size()) return {};
    r.step = std::max(r.step, free[s]);
  }
  for (size_t s = 0; s < P; ++s) r.idle.push_back(r.step - busy[s]);
  return r;
}

namespace {

// The lanes of one step from each stage's record of it (role, record), on the stages'
// shared clock; empty when a record is missing or carries no timeline.
std::vector<StageTimeline> lanes_of(const std::vector<std::pair<std::string, const json*>>& picked) {
  double t0 = std::numeric_limits<double>::infinity();
  for (const auto& [role, r] : picked) {
    if (!r) return {};
    const json& p = member(*r, "pipeline");
    if (!member(p, "timeline").is_array()) return {};
    t0 = std::min(t0, number(p, "timeline_start"));
  }
  std::vector<StageTimeline> out;
  for (const auto& [role, r] : picked) {
    const json& p = member(*r, "pipeline");
    const double shift = number(p, "timeline_start") - t0;
    StageTimeline lane;
    lane.stage = integer(p, "stage");
    lane.role = role;
    lane.step_end = shift + number(p, "step_wall");
    for (const json& op : member(p, "timeline"))
      if (op.is_array() && op.size() == 4 && op[0].is_string() && op[1].is_number() && op[2].is_number() &&
          op[3].is_number())
        lane.ops.push_back({op[0].get<std::string>(), op[1].get<int64_t>(), shift + op[2].get<double>(),
                            shift + op[3].get<double>()});
    out.push_back(std::move(lane));
  }
  std::sort(out.begin(), out.end(), [](const StageTimeline& a, const StageTimeline& b) { return a.stage < b.stage; });
  return out;
}

// Each stage's step records by step number, read once.
std::vector<std::pair<std::string, std::map<int64_t, const json*>>> records_by_step(const ArmResults& arm) {
  std::vector<std::pair<std::string, std::map<int64_t, const json*>>> out;
  for (const trainers::RoleRecords& role : arm.roles) {
    std::map<int64_t, const json*> by_step;
    for (const json* r : stage_steps(role)) by_step[integer(*r, "step")] = r;
    if (!by_step.empty()) out.emplace_back(role.role, std::move(by_step));
  }
  return out;
}

// Each stage's record of `step` (null where a stage has none).
std::vector<std::pair<std::string, const json*>> records_of_step(
    const std::vector<std::pair<std::string, std::map<int64_t, const json*>>>& stages, int64_t step) {
  std::vector<std::pair<std::string, const json*>> picked;
  for (const auto& [role, by_step] : stages) {
    const auto it = by_step.find(step);
    picked.emplace_back(role, it == by_step.end() ? nullptr : it->second);
  }
  return picked;
}

// Each stage's idle fraction in its steps but the first, replayed (replay_step).
void add_replayed_idle(const ArmResults& arm, std::vector<StageFigures>& stages) {
  if (stages.empty()) return;
  std::vector<double> idle(stages.size(), 0.0);
  double wall = 0.0;
  const auto records = records_by_step(arm);
  std::vector<int64_t> steps;
  for (const auto& [role, by_step] : records)
    if (role == stages.front().role)
      for (const auto& [step, record] : by_step) steps.push_back(step);
  for (size_t i = steps.size() > 1 ? 1 : 0; i < steps.size(); ++i) {
    const Replay r = replay_step(lanes_of(records_of_step(records, steps[i])));
    if (r.idle.size() != stages.size()) return;
    for (size_t s = 0; s < stages.size(); ++s) idle[s] += r.idle[s];
    wall += r.step;
  }
  if (wall <= 0.0) return;
  for (size_t s = 0; s < stages.size(); ++s) stages[s].replayed_idle_fraction = idle[s] / wall;
}

}  // namespace

std::vector<StageFigures> pipeline_stages(const ArmResults& arm) {
  std::vector<StageFigures> out;
  for (const trainers::RoleRecords& role : arm.roles) {
    const std::vector<const json*> steps = stage_steps(role);
    if (steps.empty()) continue;
    StageFigures f;
    f.role = role.role;
    const json& first = member(*steps.front(), "pipeline");
    f.stage = integer(first, "stage");
    f.first = text(first, "first");
    f.last = text(first, "last");
    f.schedule = text(first, "schedule");
    f.micro_batches = integer(first, "micro_batches");
    f.bubble_formula = number(first, "bubble_formula");
    const size_t from = steps.size() > 1 ? 1 : 0;
    double busy = 0.0, idle = 0.0, wall = 0.0;
    for (size_t i = 0; i < steps.size(); ++i) {
      const json& p = member(*steps[i], "pipeline");
      f.in_flight_peak = std::max(f.in_flight_peak, integer(p, "in_flight_peak"));
      f.activations_peak = std::max(f.activations_peak, number(p, "activations_peak"));
      if (i < from) continue;
      busy += number(p, "busy");
      idle += number(p, "idle");
      wall += number(p, "step_wall");
      f.steps += 1;
    }
    f.busy = busy / static_cast<double>(f.steps);
    f.idle = idle / static_cast<double>(f.steps);
    f.idle_fraction = wall > 0.0 ? idle / wall : 0.0;
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const StageFigures& a, const StageFigures& b) { return a.stage < b.stage; });
  add_replayed_idle(arm, out);
  return out;
}

double stage_balance(const std::vector<StageFigures>& stages) {
  if (stages.empty()) return 0.0;
  double lo = std::numeric_limits<double>::infinity(), hi = 0.0;
  for (const StageFigures& s : stages) {
    lo = std::min(lo, s.busy);
    hi = std::max(hi, s.busy);
  }
  return lo > 0.0 ? hi / lo : 0.0;
}

Table pipeline_table(const std::vector<StageFigures>& stages) {
  Table t{{"stage", "model stages", "busy s/step", "idle s/step", "idle fraction", "bubble formula",
           "measured / formula", "replayed idle", "activations peak", "in flight peak"},
          {false, false, true, true, true, true, true, true, true, true},
          {}};
  for (const StageFigures& s : stages) {
    const std::string span = s.first == s.last ? s.first : s.first + " … " + s.last;
    t.rows.push_back({s.role, span, fixed(s.busy, 4), fixed(s.idle, 4), percent(s.idle_fraction),
                      percent(s.bubble_formula),
                      s.bubble_formula > 0.0 ? fixed(s.idle_fraction / s.bubble_formula, 2) : "—",
                      s.replayed_idle_fraction >= 0.0 ? percent(s.replayed_idle_fraction) : "—",
                      format_mib(s.activations_peak), std::to_string(s.in_flight_peak)});
  }
  return t;
}

std::string pipeline_table_note() {
  return "Means over the step records but the first (the pipeline fills and caches warm during it). Busy: compute "
         "(batch assembly, forward, backward, optimizer); idle: the rest of the step's wall time, waiting for "
         "neighbours. The formula (P−1)/(m+P−1) is the idle fraction of a pipeline of equal stages with free "
         "transfers; a stage slower than the others idles less than it, the others more. Replayed: the idle fraction "
         "the same steps would have with each stage's own operation times and instant transfers, each operation "
         "starting once its stage is free and its input computed (the imbalance alone); measured idle above it is "
         "transfers and waiting for a neighbour the machine was not running. Balance: the busiest "
         "stage's busy time over the least busy one's. Activations: the stage process's tracked peak; in flight: "
         "the most micro-batches whose forward ran and backward had not.";
}

std::vector<StageTimeline> pipeline_timeline(const ArmResults& arm, int64_t step) {
  const auto stages = records_by_step(arm);
  if (stages.empty()) return {};
  int64_t common = std::numeric_limits<int64_t>::max();  // the last step every stage recorded
  for (const auto& [role, by_step] : stages) common = std::min(common, by_step.rbegin()->first);
  return lanes_of(records_of_step(stages, step < 0 ? common : step));
}

std::string timeline_svg(const std::vector<StageTimeline>& timeline, const std::string& title) {
  constexpr double kLeft = 70, kRight = 20, kTop = 40, kLane = 34, kBox = 24, kWidth = 900, kAxis = 36;
  double end = 0.0;
  for (const StageTimeline& lane : timeline) {
    end = std::max(end, lane.step_end);
    for (const TimelineOp& op : lane.ops) end = std::max(end, op.end);
  }
  if (end <= 0.0) end = 1.0;
  const double plot = kWidth - kLeft - kRight;
  const double height = kTop + kLane * static_cast<double>(timeline.size()) + kAxis;
  auto x = [&](double t) { return kLeft + plot * t / end; };
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(kWidth) << "\" height=\"" << num(height)
      << "\" viewBox=\"0 0 " << num(kWidth) << " " << num(height) << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << num(kLeft) << "\" y=\"20\" font-size=\"13\">" << escape_xml(title) << "</text>\n";
  for (size_t i = 0; i < timeline.size(); ++i) {
    const StageTimeline& lane = timeline[i];
    const double y = kTop + kLane * static_cast<double>(i);
    svg << "<text x=\"6\" y=\"" << num(y + kBox * 0.7) << "\">" << escape_xml(lane.role) << "</text>\n"
        << "<rect x=\"" << num(kLeft) << "\" y=\"" << num(y) << "\" width=\"" << num(x(lane.step_end) - kLeft)
        << "\" height=\"" << num(kBox) << "\" fill=\"#f2f2f2\"/>\n";
    for (const TimelineOp& op : lane.ops) {
      const char* fill = op.op == "F" ? "#4e79a7" : op.op == "B" ? "#f28e2b" : "#9d9d9d";
      const double w = std::max(0.5, x(op.end) - x(op.start));
      svg << "<rect x=\"" << num(x(op.start)) << "\" y=\"" << num(y) << "\" width=\"" << num(w) << "\" height=\""
          << num(kBox) << "\" fill=\"" << fill << "\" stroke=\"white\" stroke-width=\"0.5\"><title>"
          << escape_xml(op.op) << (op.micro >= 0 ? std::to_string(op.micro) : "") << " "
          << escape_xml(format_seconds(op.start)) << " – " << escape_xml(format_seconds(op.end))
          << "</title></rect>\n";
      if (op.micro >= 0 && w >= 14)
        svg << "<text x=\"" << num(x(op.start) + w / 2) << "\" y=\"" << num(y + kBox * 0.68)
            << "\" text-anchor=\"middle\" fill=\"white\">" << escape_xml(op.op) << op.micro << "</text>\n";
    }
  }
  const double axis = kTop + kLane * static_cast<double>(timeline.size()) + 4;
  svg << "<line x1=\"" << num(kLeft) << "\" y1=\"" << num(axis) << "\" x2=\"" << num(kLeft + plot) << "\" y2=\""
      << num(axis) << "\" stroke=\"#444\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double t = end * i / 4.0;
    svg << "<text x=\"" << num(x(t)) << "\" y=\"" << num(axis + 16) << "\" text-anchor=\"middle\">"
        << escape_xml(format_seconds(t)) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

std::string timeline_file(const ArmResults& arm) { return "pipeline-" + arm.name + ".svg"; }

}  // namespace quartet::analysis

#include "analysis/projection.h"

#include <algorithm>

#include "trainers/records.h"
#include "trainers/regime.h"
#include "transport/link.h"

namespace quartet::analysis {

using nlohmann::json;
using trainers::CriticalPath;
using trainers::PathLeg;
using trainers::PathStage;
using trainers::RecordView;
using trainers::RoleRecords;

namespace {

// Records without the regime's detail (older runs): the arm's clock role, everything in turn.
CriticalPath everything_in_turn(const RoleRecords& role) {
  PathLeg leg;
  for (const json& line : role.records) {
    const RecordView r = trainers::read_record(line);
    if (!r.is_step()) continue;
    leg.compute += r.compute_seconds();
    leg.bytes = static_cast<double>(r.bytes_sent + r.bytes_received);
    leg.messages = static_cast<double>(r.messages);
  }
  return {{PathStage{{leg}}}, "everything in turn (the records lack the regime's detail)"};
}

}  // namespace

std::vector<std::string> projection_links() {
  std::vector<std::string> out;
  for (const std::string& name : transport::link_profile_names())
    if (name != "loopback") out.push_back(name);
  std::stable_sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    return transport::link_profile(a).bandwidth_bits_per_s > transport::link_profile(b).bandwidth_bits_per_s;
  });
  return out;
}

CriticalPath critical_path(const std::string& regime, const std::vector<RoleRecords>& roles) {
  const RoleRecords* clock = trainers::clock_role(roles);
  if (!clock) return {{}, "no step records"};
  // Each regime reads its own records (its cost model in the regime table); a regime this
  // build does not know reads as everything in turn.
  const auto& table = trainers::regime_table();
  const auto it = std::find_if(table.begin(), table.end(), [&](const trainers::Regime* r) { return r->name() == regime; });
  if (it != table.end())
    if (CriticalPath path = (*it)->critical_path(roles); !path.stages.empty()) return path;
  return everything_in_turn(*clock);
}

double path_seconds(const std::vector<PathStage>& stages, double bandwidth, double latency, double* comm_seconds) {
  double total = 0.0, comm = 0.0;
  for (const PathStage& s : stages) {
    double slowest = 0.0, slowest_comm = 0.0;
    for (const PathLeg& leg : s.parallel) {
      const double c = (bandwidth > 0 ? leg.bytes * 8.0 / bandwidth : 0.0) + leg.messages * latency +
                       (leg.intra_bandwidth_bits_per_s > 0 ? leg.intra_bytes * 8.0 / leg.intra_bandwidth_bits_per_s
                                                           : 0.0) +
                       leg.intra_messages * leg.intra_latency_s;
      if (leg.compute + c >= slowest) {
        slowest = leg.compute + c;
        slowest_comm = c;
      }
    }
    total += slowest;
    comm += slowest_comm;
  }
  if (comm_seconds) *comm_seconds = comm;
  return total;
}

ArmProjection project_arm(const ArmResults& arm) {
  ArmProjection p;
  p.arm = shown_label(arm);
  p.regime = arm.regime;
  p.measured_link = arm.link;
  p.epochs = epochs_done(arm);
  const CriticalPath path = critical_path(arm.regime, arm.roles);
  const std::vector<PathStage>& stages = path.stages;
  p.path_model = path.model;
  if (stages.empty() || p.epochs <= 0) {
    p.unavailable = stages.empty() ? "no step records yet" : "no training samples recorded";
    return p;
  }
  p.measured_seconds_per_epoch = train_seconds(arm) / p.epochs;
  // Compute, bytes and messages on the path: read at an infinitely fast link, where the
  // slowest leg is the one with the most compute.
  for (const PathStage& s : stages) {
    const PathLeg* slowest = nullptr;
    for (const PathLeg& leg : s.parallel)
      if (!slowest || leg.compute > slowest->compute) slowest = &leg;
    if (!slowest) continue;
    p.compute_seconds_per_epoch += slowest->compute / p.epochs;
    p.bytes_per_epoch += slowest->bytes / p.epochs;
    p.messages_per_epoch += slowest->messages / p.epochs;
    p.intra_bytes_per_epoch += slowest->intra_bytes / p.epochs;
    if (!slowest->intra_link.empty()) p.intra_link = slowest->intra_link;
  }
  auto estimate = [&](const std::string& name) {
    const transport::LinkProfile link = transport::link_profile(name);
    LinkEstimate e{name, link.bandwidth_bits_per_s, link.latency_s, 0.0, 0.0};
    double comm = 0.0;
    e.seconds_per_epoch = path_seconds(stages, link.bandwidth_bits_per_s, link.latency_s, &comm) / p.epochs;
    e.comm_seconds_per_epoch = comm / p.epochs;
    return e;
  };
  for (const std::string& name : projection_links()) p.links.push_back(estimate(name));
  try {
    p.on_measured_link = estimate(arm.link);
  } catch (const std::exception&) {
    // An unknown link name in an old spec: nothing to compare with.
  }
  return p;
}

std::vector<std::string> projection_assumptions() {
  std::vector<std::string> out = {
      "Time per epoch on a link = measured compute on the critical path + Σ over the messages on that path "
      "(bytes × 8 / bandwidth + latency). Compute is what this run measured on this machine (forward, backward, "
      "optimizer and batch assembly; evaluation excluded); only the network is projected.",
      "Communication is not overlapped with compute (an upper bound for data_parallel, whose all-reduce overlaps "
      "backward), and every link is dedicated: no contention, no congestion, no protocol overhead beyond the "
      "framing bytes that were counted.",
      "Hierarchical collectives (data_parallel backend \"hierarchical\"): bytes between the ranks of one host go "
      "on the arm's intra_link whatever link is projected; only the bytes between hosts go on the projected link.",
      "Measured figures are this run's (its emulated link, or the unshaped loopback); projected figures are "
      "computed, and marked so. The projection onto the link an arm ran on is shown beside its measurement as a "
      "check of the model.",
  };
  // Each regime's reading of its path, from the regime table, after the general rules.
  for (const trainers::Regime* r : trainers::regime_table())
    out.insert(out.end() - 1, std::string(r->name()) + ": " + std::string(r->cost_model()));
  return out;
}

}  // namespace quartet::analysis

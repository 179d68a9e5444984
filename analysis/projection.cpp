#include "analysis/projection.h"

#include <algorithm>
#include <map>

#include "trainers/records.h"
#include "transport/link.h"

namespace quartet::analysis {

using nlohmann::json;
using trainers::CriticalPath;
using trainers::member;
using trainers::number;
using trainers::PathLeg;
using trainers::PathStage;
using trainers::RecordView;
using trainers::RoleRecords;
using trainers::text;

namespace {

// Each regime's reading of its critical path, a free function of its roles' records
// (trainers::CriticalPathReader): it returns no stages when the records lack what it reads.

// single, accumulate: one process, no network: its compute, step after step.
CriticalPath one_process_path(const std::vector<RoleRecords>& roles) {
  const RoleRecords* process = trainers::clock_role(roles);
  if (!process) return {};
  PathLeg leg;
  for (const json& line : process->records)
    if (const RecordView r = trainers::read_record(line); r.is_step()) leg.compute += r.compute_seconds();
  return {{PathStage{{leg}}}, "one process: its compute"};
}

// data_parallel: ranks side by side; each rank's ring messages are its own bytes and
// message counts (the algorithm's: 2(N−1) messages of S/N per all-reduce of S bytes).
CriticalPath ranks_path(const std::vector<RoleRecords>& roles) {
  PathStage stage;
  for (const RoleRecords& role : roles) {
    PathLeg leg;
    bool any = false;
    for (const json& line : role.records) {
      const RecordView r = trainers::read_record(line);
      if (!r.is_step()) continue;
      any = true;
      leg.compute += r.compute_seconds();
      leg.bytes = static_cast<double>(r.bytes_sent);
      leg.messages = static_cast<double>(r.messages);
    }
    if (any) stage.parallel.push_back(leg);
  }
  if (stage.parallel.empty()) return {};
  return {{stage}, "ranks side by side: the slowest rank's compute and its ring messages"};
}

// federated: per round, the sampled clients in parallel, each downloading the model,
// training and uploading; then the server's aggregation. Read from the server's rounds.
CriticalPath federated_path(const std::vector<RoleRecords>& roles) {
  const RoleRecords* server = trainers::clock_role(roles);
  if (!server) return {};
  CriticalPath path{{}, "per round: the slowest client's download, training and upload, then aggregation"};
  for (const json& r : server->records) {
    const json& round = member(r, "round");
    if (!trainers::read_record(r).is_step() || !member(round, "clients").is_array()) continue;
    const json& clients = round["clients"];
    const double messages = number(member(round, "bytes"), "messages") / std::max<double>(1.0, clients.size());
    PathStage stage;
    for (const json& c : clients)
      stage.parallel.push_back({number(c, "compute"), number(c, "bytes_down") + number(c, "bytes_up"), messages});
    if (stage.parallel.empty()) stage.parallel.push_back({});
    path.stages.push_back(std::move(stage));
    path.stages.push_back(PathStage{{PathLeg{number(member(round, "time"), "aggregation"), 0.0, 0.0}}});
  }
  return path;
}

// split: vanilla and U-shaped clients take turns, so every turn is on the path; SplitFed
// clients run side by side and the server serves them one after another. Read from the
// server's turns.
CriticalPath split_path(const std::vector<RoleRecords>& roles) {
  auto compute_of = [](const json& c) {
    return number(c, "forward") + number(c, "backward") + number(c, "optimizer") + number(c, "data");
  };
  auto turn_leg = [&](const json& turn, bool with_server) {
    PathLeg leg;
    leg.compute = compute_of(member(turn, "client_compute"));
    if (with_server) leg.compute += compute_of(member(turn, "server_compute"));
    const json& traffic = member(turn, "traffic");
    if (traffic.is_object())
      for (const auto& [kind, c] : traffic.items()) {
        leg.bytes += number(c, "sent") + number(c, "received");
        leg.messages += number(c, "messages");
      }
    return leg;
  };
  const RoleRecords* server = trainers::clock_role(roles);
  if (!server) return {};
  CriticalPath path{{}, "clients in turn: every turn's client and server compute and traffic"};
  for (const json& r : server->records) {
    const json& split = member(r, "split");
    if (!trainers::read_record(r).is_step() || !member(split, "turns").is_array()) continue;
    if (text(split, "variant") != "splitfed") {
      for (const json& turn : split["turns"]) path.stages.push_back(PathStage{{turn_leg(turn, true)}});
      continue;
    }
    path.model = "SplitFed: the slowest client's compute and traffic, then the server's compute";
    PathStage clients;
    double server_compute = 0.0;
    for (const json& turn : split["turns"]) {
      clients.parallel.push_back(turn_leg(turn, false));
      server_compute += compute_of(member(turn, "server_compute"));
    }
    if (!clients.parallel.empty()) path.stages.push_back(std::move(clients));
    path.stages.push_back(PathStage{{PathLeg{server_compute, 0.0, 0.0}}});
  }
  return path;
}

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
  static const std::map<std::string, trainers::CriticalPathReader> kReaders = {
      {"single", one_process_path},   {"accumulate", one_process_path}, {"data_parallel", ranks_path},
      {"federated", federated_path}, {"split", split_path},
  };
  if (auto it = kReaders.find(regime); it != kReaders.end())
    if (CriticalPath path = it->second(roles); !path.stages.empty()) return path;
  return everything_in_turn(*clock);
}

double path_seconds(const std::vector<PathStage>& stages, double bandwidth, double latency, double* comm_seconds) {
  double total = 0.0, comm = 0.0;
  for (const PathStage& s : stages) {
    double slowest = 0.0, slowest_comm = 0.0;
    for (const PathLeg& leg : s.parallel) {
      const double c = (bandwidth > 0 ? leg.bytes * 8.0 / bandwidth : 0.0) + leg.messages * latency;
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
  p.arm = arm.label.empty() ? arm.name : arm.label;
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
  return {
      "Time per epoch on a link = measured compute on the critical path + Σ over the messages on that path "
      "(bytes × 8 / bandwidth + latency). Compute is what this run measured on this machine (forward, backward, "
      "optimizer and batch assembly; evaluation excluded); only the network is projected.",
      "Communication is not overlapped with compute (an upper bound for data_parallel, whose all-reduce overlaps "
      "backward), and every link is dedicated: no contention, no congestion, no protocol overhead beyond the "
      "framing bytes that were counted.",
      "single, accumulate: one process, no messages: the same on every link.",
      "data_parallel: the ranks run side by side; each rank's bytes and messages are the algorithm's (a ring "
      "all-reduce of S bytes over N ranks is 2(N−1) messages of S/N, one per bucket), so Gloo and NCCL traffic, "
      "which no socket counts, is projected like the rest.",
      "federated: per round, the slowest sampled client (download, local training, upload, each client on its "
      "own link to the server), then the server's aggregation; clients that shared a pool process here run on "
      "their own machines in the projection.",
      "split: vanilla and U-shaped clients take turns, so every turn's client and server compute and traffic "
      "(activations, gradients, labels, the client half handed on) is on the path; SplitFed clients run side by "
      "side and the server serves them one after another.",
      "Measured figures are this run's (its emulated link, or the unshaped loopback); projected figures are "
      "computed, and marked so. The projection onto the link an arm ran on is shown beside its measurement as a "
      "check of the model.",
  };
}

}  // namespace quartet::analysis

#include "trainers/data_parallel/data_parallel.h"

#include "transport/link.h"

namespace quartet::trainers::data_parallel {

namespace {

// A hierarchical step: its bytes and messages within the host go on the arm's intra-host
// link, those between hosts (a leader's) on the projected one.
void add_levels(PathLeg& leg, const nlohmann::json& comm, double& inter_bytes, double& inter_messages) {
  const nlohmann::json& intra = comm["levels"]["intra"];
  const nlohmann::json& inter = comm["levels"]["inter"];
  leg.intra_bytes += intra.value("bytes", 0.0);
  leg.intra_messages += intra.value("messages", 0.0);
  inter_bytes += inter.value("bytes", 0.0);
  inter_messages += inter.value("messages", 0.0);
  if (leg.intra_link.empty()) {
    leg.intra_link = comm.value("intra_link", std::string("loopback"));
    const transport::LinkProfile link = transport::link_profile(leg.intra_link);
    leg.intra_bandwidth_bits_per_s = link.bandwidth_bits_per_s;
    leg.intra_latency_s = link.latency_s;
  }
}

}  // namespace

// Each rank's ring messages are its own bytes and message counts (the algorithm's:
// 2(N−1) messages of S/N per all-reduce of S bytes), cumulative in its step records;
// with hierarchical collectives, each level's, per step.
CriticalPath critical_path(const std::vector<RoleRecords>& roles) {
  PathStage stage;
  for (const RoleRecords& role : roles) {
    PathLeg leg;
    bool any = false, levels = false;
    double inter_bytes = 0.0, inter_messages = 0.0;
    for (const nlohmann::json& line : role.records) {
      const RecordView r = read_record(line);
      if (!r.is_step()) continue;
      any = true;
      leg.compute += r.compute_seconds();
      leg.bytes = static_cast<double>(r.bytes_sent);
      leg.messages = static_cast<double>(r.messages);
      const auto comm = line.find("comm");
      if (comm != line.end() && comm->contains("levels")) {
        levels = true;
        add_levels(leg, *comm, inter_bytes, inter_messages);
      }
    }
    if (levels) {
      leg.bytes = inter_bytes;
      leg.messages = inter_messages;
    }
    if (any) stage.parallel.push_back(leg);
  }
  if (stage.parallel.empty()) return {};
  return {{stage}, "ranks side by side: the slowest rank's compute and its ring messages"};
}

}  // namespace quartet::trainers::data_parallel

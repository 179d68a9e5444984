#include "trainers/mesh/cost_model.h"

#include "transport/link.h"

namespace quartet::trainers::mesh {

// Each step record's comm.axes holds that step's bytes and messages per axis.
CriticalPath critical_path(const std::vector<RoleRecords>& roles) {
  PathStage stage;
  for (const RoleRecords& role : roles) {
    PathLeg leg;
    bool any = false;
    for (const nlohmann::json& line : role.records) {
      const RecordView r = read_record(line);
      if (!r.is_step()) continue;
      const auto comm = line.find("comm");
      if (comm == line.end() || !comm->contains("axes")) return {};
      any = true;
      leg.compute += r.compute_seconds();
      for (const auto& [axis, counts] : (*comm)["axes"].items()) {
        const bool intra = axis_within_node(axis);
        (intra ? leg.intra_bytes : leg.bytes) += counts.value("bytes", 0.0);
        (intra ? leg.intra_messages : leg.messages) += counts.value("messages", 0.0);
      }
      if (leg.intra_link.empty()) {
        leg.intra_link = comm->value("intra_link", std::string("nvlink"));
        const transport::LinkProfile link = transport::link_profile(leg.intra_link);
        leg.intra_bandwidth_bits_per_s = link.bandwidth_bits_per_s;
        leg.intra_latency_s = link.latency_s;
      }
    }
    if (any) stage.parallel.push_back(leg);
  }
  if (stage.parallel.empty()) return {};
  return {{stage},
          "ranks side by side: the slowest rank's compute, its tp and cp bytes and messages on the arm's intra_link "
          "(within a node), its dp, pp and ep ones on the projected link (between nodes)"};
}

}  // namespace quartet::trainers::mesh

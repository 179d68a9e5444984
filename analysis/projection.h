#pragma once

// The report's projection (docs/results.md): each arm's time per epoch on
// link profiles it did not run on, from what it measured: compute seconds, bytes and
// message counts. Time on a link = compute on the critical path + Σ over the messages on
// that path (bytes / bandwidth + latency).

#include <optional>
#include <string>
#include <vector>

#include "analysis/results_model.h"
#include "trainers/cost_model.h"

namespace quartet::analysis {

struct LinkEstimate {
  std::string link;
  double bandwidth_bits_per_s = 0.0;
  double latency_s = 0.0;
  double seconds_per_epoch = 0.0;
  double comm_seconds_per_epoch = 0.0;  // the part spent on messages
};

struct ArmProjection {
  std::string arm;  // its label
  std::string regime;
  std::string path_model;             // how its critical path was read, in words
  std::string unavailable;            // why nothing is projected (no records yet …), else empty
  double epochs = 0.0;
  double measured_seconds_per_epoch = 0.0;  // train time (evaluation excluded) / epochs
  std::string measured_link;          // the link it ran on (loopback: unshaped)
  double compute_seconds_per_epoch = 0.0;   // on the critical path
  double bytes_per_epoch = 0.0;             // on the critical path
  double messages_per_epoch = 0.0;          // on the critical path
  // Hierarchical collectives: bytes within a host, on the critical path, priced at
  // intra_link on every projection (bytes_per_epoch is then what crosses between hosts).
  double intra_bytes_per_epoch = 0.0;
  std::string intra_link;
  std::optional<LinkEstimate> on_measured_link;  // the projection onto the link it ran on
  std::vector<LinkEstimate> links;          // one per projection_links()
};

// Link profiles the report projects onto, fastest first: nvlink, infiniband, 10gbe,
// 1gbe, wan-100mbit, lte (transport/link.h presets; loopback is not a network).
std::vector<std::string> projection_links();

// The critical path of one arm of `regime` from its roles' records, stage by stage: the
// regime's reading (projection_assumptions() says how each regime is read), or, for
// records without the regime's detail, everything the clock role did in turn; no stages
// before the first step record.
trainers::CriticalPath critical_path(const std::string& regime, const std::vector<trainers::RoleRecords>& roles);

// Seconds for `stages` on a link: Σ stages max over legs (compute + bytes·8/bw + messages·latency).
double path_seconds(const std::vector<trainers::PathStage>& stages, double bandwidth_bits_per_s, double latency_s,
                    double* comm_seconds = nullptr);

ArmProjection project_arm(const ArmResults& arm);

// The assumptions, one Markdown bullet per line, for the report.
std::vector<std::string> projection_assumptions();

}  // namespace quartet::analysis

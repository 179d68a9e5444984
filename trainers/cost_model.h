#pragma once

// A regime's cost model for the report's projection (analysis/projection.h; each
// regime reads its own records: Regime::critical_path): the
// critical path of one arm, read from its roles' records as stages run one after
// another, each of legs run side by side. Time on a link = Σ over the stages of the
// slowest leg's compute + its messages' (bytes × 8 / bandwidth + latency).

#include <string>
#include <vector>

#include "trainers/records.h"

namespace quartet::trainers {

// One sequential piece of the critical path: compute, then messages of `bytes` in all
// on the link projected onto, and `intra_bytes` in `intra_messages` on a link of its
// own between ranks of one host (hierarchical collectives), whatever link is projected.
struct PathLeg {
  double compute = 0.0;  // seconds
  double bytes = 0.0;
  double messages = 0.0;
  double intra_bytes = 0.0;
  double intra_messages = 0.0;
  double intra_bandwidth_bits_per_s = 0.0;  // 0: unshaped (free)
  double intra_latency_s = 0.0;
  std::string intra_link{};  // its preset's name; empty when there are no intra-host bytes
};

// Legs that run side by side (ranks, a round's clients): the slowest decides.
struct PathStage {
  std::vector<PathLeg> parallel;
};

struct CriticalPath {
  std::vector<PathStage> stages;  // empty: the records lack what the reading needs
  std::string model;              // how the path was read, in words, for the report
};

// One process and no network (single, accumulate): the compute of its clock role's
// steps, one after another.
CriticalPath one_process_path(const std::vector<RoleRecords>& roles);

}  // namespace quartet::trainers

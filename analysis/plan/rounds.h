#pragma once

// Split and federated learning: clients, not a mesh. A split step is one client's batch
// through its half, the activations to the server, the server's half, the gradients
// back (vanilla and U-shaped: clients in turn; SplitFed: clients side by side, the
// server's halves one after another). A federated step is a round: the clients asked
// (fraction × clients, less those that drop out) download the model, train locally and
// upload their update; the round waits for the slowest that answers, then aggregates.
// With the cluster's population each client's speed and links are drawn (seeded) from
// its distributions; without one, clients are processes on the cluster's node.

#include <cstdint>
#include <vector>

#include "analysis/plan/cost.h"

namespace quartet::analysis::plan {

Prediction predict_split(const ModelShape& model, const PlanArm& arm, const ClusterProfile& cluster);
Prediction predict_federated(const ModelShape& model, const PlanArm& arm, const ClusterProfile& cluster,
                             uint64_t seed = 1);

// One client's draw from a population.
struct ClientDraw {
  double flops_per_s = 0.0;
  double down_bytes_per_s = 0.0;
  double up_bytes_per_s = 0.0;
  double latency_s = 0.0;
  bool drops = false;
};
// `count` clients drawn from `p`, the same for the same seed.
std::vector<ClientDraw> draw_clients(const Population& p, int64_t count, uint64_t seed);

}  // namespace quartet::analysis::plan

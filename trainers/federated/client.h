#pragma once

// A federated client's local training, independent of any transport: start from the
// global weights, run local epochs over the client's own samples, return the new
// weights. The pool processes of trainers/federated/federated.cpp call it; tests call it directly.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model.h"
#include "trainers/federated/strategy.h"
#include "trainers/optimizer.h"
#include "workloads/workload.h"

namespace quartet::trainers::federated {

// The state_dict of `m` as flat buffers (Params order: parameters, then buffers).
Params params_of(const engine::Module& m);
// Copies `p` into m's state_dict tensors. requires p shaped as params_of(m).
void load_params(engine::Module& m, const Params& p);
// Bytes of a model's state as float32.
int64_t params_bytes(const Params& p);

struct LocalConfig {
  int64_t local_epochs = 1;
  int64_t batch = 64;          // local batch; a client with fewer samples takes them all in one batch
  OptimizerConfig optimizer;   // a fresh optimizer every round (no state carried between rounds)
  double mu = 0.0;             // FedProx: grad += mu * (w - w_global)
  double clip_grad_norm = 0.0;
  uint64_t seed = 1;
};

struct LocalResult {
  Params weights;
  int64_t samples_processed = 0;  // local_epochs * steps * batch
  int64_t steps = 0;
  double loss = 0.0;              // mean of the steps' losses
  double forward = 0.0, backward = 0.0, optimizer = 0.0, data = 0.0;  // seconds
};

// The samples a client with `partition_samples` samples processes in a round, as
// train_client trains it: local_epochs epochs of whole batches of min(batch, partition).
int64_t local_samples(int64_t partition_samples, int64_t batch, int64_t local_epochs);

// Trains `model` from `global` on `indices` (training samples of wl) for
// cfg.local_epochs epochs of min(cfg.batch, indices.size()) samples a step, the last
// partial batch dropped. The order is seeded from (cfg.seed, client, round) only, so a
// client's round gives the same weights whichever process runs it, whenever.
// requires indices non-empty
LocalResult train_client(engine::Model& model, const workloads::Workload& wl, const std::vector<int64_t>& indices,
                         const Params& global, const LocalConfig& cfg, int64_t client, int64_t round);

std::vector<std::string> byzantine_attacks();

// A Byzantine client's reply in place of its honest weights w, elementwise:
//   sign_flip: global - scale (w - global)      scale: global + scale (w - global)
// It is applied where the client builds its reply, so the bytes sent and the time taken
// are a real client's. requires weights shaped as global; throws for an unknown attack
void corrupt_update(Params& weights, const Params& global, const std::string& attack, double scale);

}  // namespace quartet::trainers::federated

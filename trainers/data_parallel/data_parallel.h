#pragma once

// data_parallel: N ranks, each B/N of every global batch, gradients averaged by bucketed
// asynchronous all-reduces while backward runs (data_parallel/reducer.h), the same
// optimizer step on every rank. Optional SyncBatchNorm, ZeRO-style sharding (zero 1:
// optimizer state, zero 2: also gradients, zero 3: also parameters, gathered stage by
// stage: data_parallel/sharded_model.h) and fp16 compression. docs/data_parallel.md
// says what is measured. Roles "rank0" .. "rank{N-1}".

#include <cstdint>
#include <string>

#include "trainers/regime.h"

namespace quartet::trainers::data_parallel {

struct Settings : RegimeSettings {
  int64_t ranks = 1;
  int64_t micro_batches = 1;     // per rank; gradients communicated on the last only
  std::string backend = "gloo";  // gloo, shm, hierarchical (CPU); nccl (GPU)
  std::string intra_link = "nvlink";  // hierarchical: the projection's link within a host
  double bucket_mb = 25.0;       // PyTorch DDP's default bucket size
  bool sync_bn = false;
  int64_t zero = 0;              // 1: shard optimizer state; 2: also gradients; 3: also parameters
  std::string compress = "none"; // none, fp16

  static const SettingsTable<Settings>& table();
};

const Regime& regime();

// The cost model: ranks side by side, each with its compute and its ring messages.
CriticalPath critical_path(const std::vector<RoleRecords>& roles);

}  // namespace quartet::trainers::data_parallel

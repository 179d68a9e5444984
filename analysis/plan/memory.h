#pragma once

// Memory per device by tag (engine/memory.h's tags): model state by ZeRO stage
// (Rajbhandari et al. 2020, Figure 1: (2 + 2 + K) Ψ bytes for Ψ parameters in mixed
// precision with Adam, K = 12, sharded over N data-parallel ranks as stage 1 shards the
// optimizer state, 2 also the gradients, 3 also the parameters), and activations by what
// a stage keeps for backward: per micro-batch in flight, by schedule, less with
// recomputation.

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/plan/model_shape.h"

namespace quartet::analysis::plan {

struct MemoryBytes {
  double parameters = 0.0;
  double gradients = 0.0;
  double optimizer_state = 0.0;
  double activations = 0.0;
  double communication = 0.0;
  double workspace = 0.0;

  double total() const { return parameters + gradients + optimizer_state + activations + communication + workspace; }
};

// Bytes per parameter of each kind of model state.
struct StateBytes {
  double parameter = 4.0;
  double gradient = 4.0;
  double optimizer = 8.0;  // ZeRO's K
};
// fp32: 4, 4 and Adam's two moments 8 (SGD with momentum 4); bf16/fp16 mixed precision:
// 2, 2 and K = 12 (fp32 master weights, momentum, variance; SGD: 8). std::invalid_argument
// naming the precisions and optimizers known.
StateBytes state_bytes(const std::string& precision, const std::string& optimizer);
double element_bytes(const std::string& precision);  // 4, or 2 for bf16/fp16

// Model state of `parameters` on one device of `dp` data-parallel ranks at ZeRO `stage`.
MemoryBytes model_state(double parameters, int64_t stage, int64_t dp, const StateBytes& b);

// What a device keeps for backward from the layers [first, last) of `m`, for one
// micro-batch of `samples`, split `tp` ways where a layer is tensor-parallel (all of
// them with sequence parallelism) and `cp` ways by positions. With `checkpointing`, only
// the stage's input is kept (plus, during backward, one stage recomputed: `recompute`).
struct ActivationBytes {
  double kept = 0.0;       // per micro-batch in flight
  double recompute = 0.0;  // the largest stage recomputed at once (checkpointing), else 0
};
ActivationBytes activations(const ModelShape& m, size_t first, size_t last, double samples, int64_t tp, int64_t cp,
                            bool sequence_parallel, bool checkpointing, const std::string& precision);

// Micro-batches' worth of a pipeline stage's activations held at once: GPipe all m, 1F1B
// min(P − stage, m) (stage from 0; PipeDream-Flush, Narayanan et al. 2021); interleaved
// 1F1B with v chunks, Megatron's warm-up of 2 (P − stage − 1) + (v − 1) P + 1 chunks,
// each 1/v of the stage's.
double micro_batches_in_flight(const std::string& schedule, int64_t stage, int64_t stages, int64_t micro_batches,
                               int64_t virtual_stages = 1);

}  // namespace quartet::analysis::plan

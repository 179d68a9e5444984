#include "analysis/plan/memory.h"

#include <algorithm>
#include <stdexcept>

namespace quartet::analysis::plan {

double element_bytes(const std::string& precision) {
  if (precision == "fp32") return 4.0;
  if (precision == "bf16" || precision == "fp16") return 2.0;
  throw std::invalid_argument("precision " + precision + ": expected fp32, bf16 or fp16");
}

StateBytes state_bytes(const std::string& precision, const std::string& optimizer) {
  const double e = element_bytes(precision);
  const bool mixed = e < 4.0;
  double moments = 0.0;
  if (optimizer == "adam" || optimizer == "adamw") moments = 8.0;
  else if (optimizer == "sgd") moments = 4.0;
  else throw std::invalid_argument("optimizer " + optimizer + ": expected adam, adamw or sgd");
  return {e, e, moments + (mixed ? 4.0 : 0.0)};  // mixed: an fp32 master copy as well
}

MemoryBytes model_state(double parameters, int64_t stage, int64_t dp, const StateBytes& b) {
  if (stage < 0 || stage > 3) throw std::invalid_argument("zero: expected a stage 0..3, got " + std::to_string(stage));
  const double n = static_cast<double>(std::max<int64_t>(1, dp));
  MemoryBytes m;
  m.parameters = parameters * b.parameter / (stage >= 3 ? n : 1.0);
  m.gradients = parameters * b.gradient / (stage >= 2 ? n : 1.0);
  m.optimizer_state = parameters * b.optimizer / (stage >= 1 ? n : 1.0);
  return m;
}

ActivationBytes activations(const ModelShape& m, size_t first, size_t last, double samples, int64_t tp, int64_t cp,
                            bool sequence_parallel, bool checkpointing, const std::string& precision) {
  const double e = element_bytes(precision);
  double kept = 0.0;
  for (size_t i = first; i < last && i < m.layers.size(); ++i) {
    const Layer& l = m.layers[i];
    const double split = (l.tensor_parallel || sequence_parallel ? static_cast<double>(tp) : 1.0) * static_cast<double>(cp);
    kept += l.saved_elements * samples * e / split;
  }
  if (!checkpointing) return {kept, 0.0};
  // Kept: the stage's input; recomputed in backward: one block of the stage at a time.
  const double input = first > 0 ? m.layers[first - 1].output_elements * samples * e / static_cast<double>(cp)
                                  : m.layers[first].saved_elements * samples * e;
  double largest_stage = 0.0, current = 0.0;
  std::string stage = first < m.layers.size() ? m.layers[first].stage : "";
  for (size_t i = first; i < last && i < m.layers.size(); ++i) {
    const Layer& l = m.layers[i];
    if (l.stage != stage) largest_stage = std::max(largest_stage, current), current = 0.0, stage = l.stage;
    const double split = (l.tensor_parallel || sequence_parallel ? static_cast<double>(tp) : 1.0) * static_cast<double>(cp);
    current += l.saved_elements * samples * e / split;
  }
  largest_stage = std::max(largest_stage, current);
  // Every model stage's input is kept (Megatron's full recomputation per layer).
  double boundaries = input;
  for (size_t i = first + 1; i < last && i < m.layers.size(); ++i)
    if (m.layers[i].stage != m.layers[i - 1].stage) boundaries += m.layers[i - 1].output_elements * samples * e / static_cast<double>(cp);
  return {boundaries, largest_stage};
}

double micro_batches_in_flight(const std::string& schedule, int64_t stage, int64_t stages, int64_t micro_batches,
                               int64_t virtual_stages) {
  if (schedule == "gpipe") return static_cast<double>(micro_batches);
  if (schedule == "1f1b" && virtual_stages > 1) {
    // Megatron's interleaved warm-up: 2 (P − stage − 1) + (v − 1) P chunk forwards before
    // the first backward, plus the one in flight; a chunk keeps 1/v of the stage's.
    const int64_t chunks = 2 * (stages - stage - 1) + (virtual_stages - 1) * stages + 1;
    return static_cast<double>(std::min(chunks, micro_batches * virtual_stages)) / static_cast<double>(virtual_stages);
  }
  if (schedule == "1f1b") return static_cast<double>(std::min(stages - stage, micro_batches));
  throw std::invalid_argument("schedule " + schedule + ": expected gpipe or 1f1b");
}

}  // namespace quartet::analysis::plan

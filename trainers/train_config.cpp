#include "trainers/train_config.h"

#include <algorithm>

namespace quartet::trainers {

const SettingsTable<TrainConfig>& TrainConfig::table() {
  static const SettingsTable<TrainConfig> t = [] {
    using T = TrainConfig;
    SettingsTable<T> t;
    t.add(&T::epochs, "epochs", "passes over the training set (epoch-equivalents); at most a million, a run that ends")
        .at_least(1)
        .at_most(kMaxEpochs);
    t.add(&T::batch, "batch", "samples behind one optimizer step of the global model; at most the training set")
        .at_least(1)
        .at_most(kMaxBatch)
        .needed();
    // Bits per character have no ceiling: the spec checks accuracy and Dice targets against 1.
    t.add(&T::target, "target",
          "quality (the test metric: accuracy, mean Dice for volumes, bits per character for text; at most 1 but "
          "for text) to reach, at or above it (at or below it for bits per character); time and samples to it "
          "are reported")
        .above(0.0);
    t.add(&T::optimizer, "optimizer", "the optimizer", OptimizerConfig::table());
    t.add(&T::schedule, "schedule", "learning-rate schedule over optimizer steps", ScheduleConfig::table());
    t.add(&T::clip_grad_norm, "clip_grad_norm", "clip gradients to this global L2 norm; 0 turns clipping off")
        .at_least(0.0);
    t.add(&T::eval_batch, "eval_batch",
          "batch size for test-set evaluation (a larger one than the test set evaluates it at once)")
        .at_least(1)
        .at_most(kMaxBatch);
    t.add(&T::eval_every, "eval_every",
          "training samples between test-set evaluations inside an epoch (every epoch's end evaluates too); 0: "
          "each epoch split in ceil(5 / epochs) parts, so a run of one epoch evaluates 5 times (federated arms "
          "evaluate after every round; split arms at the end of the first client turn past each point)")
        .at_least(0);
    t.add(&T::max_steps, "max_steps", "stop each arm after this many optimizer steps; 0: no limit").at_least(0);
    t.add(&T::checkpoint, "checkpoint",
          "activation checkpointing: each model stage but the last keeps only its inputs in forward and is "
          "recomputed in backward (less memory, more compute; every regime)");
    t.add(&T::precision, "precision",
          "matrix products and convolutions on a GPU: fp32 (exact) or tf32 (tensor cores, inputs rounded to 10-bit "
          "mantissas, fp32 sums); the CPU computes fp32 either way")
        .allowed({"fp32", "tf32"});
    return t;
  }();
  return t;
}

int64_t eval_interval(const TrainConfig& cfg, int64_t train_size) {
  if (cfg.eval_every > 0) return cfg.eval_every;
  const int64_t epochs = std::max<int64_t>(cfg.epochs, 1);
  const int64_t parts = (kMinEvaluations + epochs - 1) / epochs;
  return std::max<int64_t>(1, (train_size + parts - 1) / parts);
}

bool evaluation_due(const TrainConfig& cfg, int64_t train_size, int64_t before, int64_t after) {
  const int64_t every = eval_interval(cfg, train_size);
  return after / every > before / every;
}

TrainConfig TrainConfig::parse(nlohmann::json& train, const std::string& path) {
  TrainConfig c = table().parse(train, path);
  c.optimizer.check(path + ".optimizer");
  return c;
}

}  // namespace quartet::trainers

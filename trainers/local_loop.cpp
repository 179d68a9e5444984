#include "trainers/local_loop.h"

#include <algorithm>
#include <stdexcept>

#include "engine/autograd.h"
#include "engine/safetensors.h"
#include "trainers/checkpoint.h"
#include "trainers/metrics.h"
#include "workloads/sampler.h"

namespace quartet::trainers {

LoopPlan plan_loop(const TrainConfig& cfg, int64_t train_size) {
  LoopPlan p;
  p.steps_per_epoch = workloads::batches_per_epoch(train_size, cfg.batch);
  if (p.steps_per_epoch < 1)
    throw std::invalid_argument("batch " + std::to_string(cfg.batch) + " is larger than the training set (" +
                                std::to_string(train_size) + " samples)");
  p.total_steps = cfg.epochs * p.steps_per_epoch;
  if (cfg.max_steps > 0) p.total_steps = std::min(p.total_steps, cfg.max_steps);
  return p;
}

std::shared_ptr<engine::Model> load_initial_model(const RoleContext& ctx) {
  std::shared_ptr<engine::Model> model = ctx.workload->make_model(ctx.model_name, ctx.config.seed);
  engine::load_state_dict(*model, engine::read_safetensors(ctx.init_weights.string()).tensors);
  model->set_checkpointing(ctx.config.checkpoint);
  return model;
}

void finish_step(const RoleContext& ctx, JsonlWriter& records, StepRecord& r, double wall0,
                 const Stopwatch& clock, bool evaluate, engine::Model& model, const nlohmann::json& extra) {
  const workloads::Workload& wl = *ctx.workload;
  const engine::MemStats train_mem = engine::memory_stats();
  if (evaluate) {
    Stopwatch te;
    const double value = wl.evaluate(model, ctx.config.eval_batch);
    r.eval = Evaluation{wl.metric_name(), value, wl.test_size(), te.seconds()};
    engine::reset_memory_peaks();
  }
  r.wall = wall0 + clock.seconds();
  nlohmann::json record = to_json(r, ctx.arm, ctx.role, ctx.rank, train_mem);
  record.update(extra);
  records.write(record);
  if (ctx.on_record) ctx.on_record(record.dump());
}

void train_locally(const RoleContext& ctx, int64_t micro_batches) {
  const TrainConfig& cfg = ctx.config;
  const workloads::Workload& wl = *ctx.workload;
  if (micro_batches < 1 || cfg.batch % micro_batches != 0)
    throw std::invalid_argument("micro_batches " + std::to_string(micro_batches) + " does not divide batch " +
                                std::to_string(cfg.batch));
  const int64_t train_size = wl.train_size();
  const LoopPlan plan = plan_loop(cfg, train_size);
  const int64_t steps_per_epoch = plan.steps_per_epoch;
  const int64_t micro = cfg.batch / micro_batches;

  std::shared_ptr<engine::Model> model = load_initial_model(ctx);
  std::unique_ptr<engine::Optimizer> opt = make_optimizer(cfg.optimizer, model->parameters());
  engine::Optimizer& optimizer = *opt;
  const auto schedule = make_schedule(cfg.optimizer, cfg.schedule, cfg.batch, plan.total_steps);

  Position pos;
  if (ctx.resume) {
    if (auto p = load_checkpoint(checkpoint_path(ctx.arm_dir), *model, optimizer)) pos = *p;
  }
  JsonlWriter records(records_path(ctx.arm_dir, ctx.role).string(),
                      ctx.resume ? std::optional<int64_t>(pos.records_bytes) : std::nullopt);
  const double wall0 = pos.wall;
  Stopwatch clock;

  bool capped = false;
  for (int64_t epoch = pos.epochs_done; epoch < cfg.epochs && !capped; ++epoch) {
    const std::vector<int64_t> order = workloads::epoch_permutation(train_size, cfg.seed, epoch);
    for (int64_t b = 0; b < steps_per_epoch; ++b) {
      StepRecord r;
      model->train();
      optimizer.zero_grad();
      double loss_sum = 0.0;
      for (int64_t m = 0; m < micro_batches; ++m) {
        Stopwatch t;
        std::vector<int64_t> idx(order.begin() + b * cfg.batch + m * micro,
                                 order.begin() + b * cfg.batch + (m + 1) * micro);
        workloads::Batch batch = wl.train_batch(idx, epoch);
        r.data += t.seconds();
        t.restart();
        engine::Tensor loss = wl.loss(model->forward(batch.x), batch.y);
        r.forward += t.seconds();
        t.restart();
        loss_sum += loss.item();
        engine::scale(loss, 1.0f / static_cast<float>(micro_batches)).backward();
        r.backward += t.seconds();
      }
      Stopwatch t;
      optimizer.set_lr(schedule->lr_at(pos.step));
      if (cfg.clip_grad_norm > 0.0) engine::clip_grad_norm(optimizer.params(), cfg.clip_grad_norm);
      optimizer.step();
      r.optimizer = t.seconds();

      pos.step += 1;
      pos.samples += cfg.batch;
      r.step = pos.step;
      r.samples = pos.samples;
      r.epoch = static_cast<double>(pos.samples) / static_cast<double>(train_size);
      r.loss = loss_sum / static_cast<double>(micro_batches);
      r.lr = optimizer.lr();
      capped = cfg.max_steps > 0 && pos.step >= cfg.max_steps;
      const bool epoch_end = b + 1 == steps_per_epoch || capped;
      finish_step(ctx, records, r, wall0, clock, epoch_end, *model);
      if (capped) break;
    }
    if (!capped) {
      pos.epochs_done = epoch + 1;
      pos.wall = wall0 + clock.seconds();
      pos.records_bytes = records.bytes();
      save_checkpoint(checkpoint_path(ctx.arm_dir), *model, optimizer, pos);
    }
  }
  engine::save_safetensors(final_weights_path(ctx.arm_dir).string(), model->state_dict());
}

}  // namespace quartet::trainers

#include "trainers/training_loop.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include "engine/autograd.h"
#include "engine/device_memory.h"
#include "engine/ops.h"
#include "engine/safetensors.h"
#include "workloads/sampler.h"

namespace quartet::trainers {

double Reducer::step(engine::Optimizer& optimizer, double clip_grad_norm) {
  if (clip_grad_norm > 0.0) engine::clip_grad_norm(optimizer.params(), clip_grad_norm);
  optimizer.step();
  return 0.0;
}

workloads::Batch sequence_positions(const workloads::Batch& b, const std::vector<int64_t>& positions) {
  const int64_t n = b.x.size(0), t = b.x.size(1), l = static_cast<int64_t>(positions.size());
  const std::vector<float> x = b.x.to_vector();
  std::vector<float> xs;
  workloads::Batch out;
  xs.reserve(static_cast<size_t>(n * l));
  out.y.reserve(static_cast<size_t>(n * l));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p : positions) {
      xs.push_back(x[static_cast<size_t>(i * t + p)]);
      out.y.push_back(b.y[static_cast<size_t>(i * t + p)]);
    }
  out.x = engine::Tensor::from_vector({n, l}, xs);
  return out;
}

double WholeModelStep::run(const workloads::Batch& whole, float scale, StepTimes& t) {
  const workloads::Batch local = local_ ? local_(whole) : workloads::Batch{};
  const workloads::Batch& batch = local_ ? local : whole;
  // SyncBatchNorm communicates inside forward and backward: that time is not compute.
  double inline0 = reducer_.inline_seconds();
  Stopwatch clock;
  engine::Tensor loss = workload_.loss(model_.forward(batch.x.to(device_)), batch.y);
  // A GPU queues kernels and returns: each phase is timed to the end of its kernels.
  engine::device_synchronize(device_);
  t.forward += clock.seconds() - (reducer_.inline_seconds() - inline0);
  inline0 = reducer_.inline_seconds();
  clock.restart();
  const double value = loss.item();
  {
    // A layer's side loss (gpt-moe's balance loss) weighs what this loss weighs.
    engine::SideLossWeightScope side(scale);
    engine::scale(loss, scale).backward();
  }
  engine::device_synchronize(device_);
  t.backward += clock.seconds() - (reducer_.inline_seconds() - inline0);
  return value;
}

StepTimes train_step(const workloads::Workload& wl, std::span<const int64_t> samples, int64_t epoch,
                     const std::vector<engine::Tensor>& params, engine::Optimizer& optimizer, Reducer& reducer,
                     MicroStep& micro, const StepOptions& o) {
  const int64_t k = o.micro_batches;
  if (k < 1 || static_cast<int64_t>(samples.size()) % k != 0)
    throw std::invalid_argument("micro_batches " + std::to_string(k) + " does not divide the step's " +
                                std::to_string(samples.size()) + " samples");
  const int64_t slice = static_cast<int64_t>(samples.size()) / k;
  StepTimes t;
  for (engine::Tensor p : params) p.zero_grad();
  optimizer.zero_grad();
  reducer.begin_step();
  const double inline0 = reducer.inline_seconds();
  double loss_sum = 0.0;
  for (int64_t m = 0; m < k; ++m) {
    Stopwatch clock;
    const auto first = samples.begin() + m * slice;
    workloads::Batch batch = wl.train_batch(std::vector<int64_t>(first, first + slice), epoch);
    t.data += clock.seconds();
    reducer.prepare(m + 1 == k);
    loss_sum += micro.run(batch, 1.0f / static_cast<float>(k), t);
  }
  t.comm_exposed = reducer.finish() + (reducer.inline_seconds() - inline0);

  Stopwatch clock;
  if (o.lr) optimizer.set_lr(*o.lr);
  if (o.before_step) o.before_step();
  const double step_comm = reducer.step(optimizer, o.clip_grad_norm);
  if (!params.empty()) engine::device_synchronize(params.front().device());
  t.optimizer = clock.seconds() - step_comm;
  t.comm_exposed += step_comm;
  t.loss = loss_sum / static_cast<double>(k);
  return t;
}

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

std::shared_ptr<engine::Model> make_model(const RoleContext& ctx) {
  std::shared_ptr<engine::Model> model = ctx.workload->make_model(ctx.model_name, ctx.config.seed);
  model->to(ctx.device);
  model->set_checkpointing(ctx.config.checkpoint);
  return model;
}

std::shared_ptr<engine::Model> load_initial_model(const RoleContext& ctx) {
  std::shared_ptr<engine::Model> model = make_model(ctx);
  engine::load_state_dict(*model, engine::read_safetensors(ctx.init_weights.string()).tensors);
  return model;
}

void finish_step(const RoleContext& ctx, JsonlWriter& records, StepRecord& r, double wall0,
                 const Stopwatch& clock, bool evaluate, engine::Model& model, const nlohmann::json& extra,
                 const std::optional<engine::MemStats>& train_memory) {
  const workloads::Workload& wl = *ctx.workload;
  const engine::MemStats train_mem = train_memory ? *train_memory : engine::memory_stats();
  const bool gpu = !ctx.device.is_cpu();
  const nlohmann::json gpu_mem = gpu ? gpu_memory_json(ctx.device) : nlohmann::json();
  if (evaluate) {
    Stopwatch te;
    const double value = wl.evaluate(model, ctx.config.eval_batch);
    r.eval = Evaluation{wl.metric_name(), value, wl.test_size(), te.seconds()};
    engine::reset_memory_peaks();
    if (gpu) engine::reset_device_memory_peaks(ctx.device);
  }
  r.wall = wall0 + clock.seconds();
  nlohmann::json record = to_json(r, ctx.arm, ctx.role, ctx.rank, train_mem);
  if (gpu) record["gpu_memory"] = gpu_mem;
  record.update(extra);
  records.write(record);
  if (ctx.on_record) ctx.on_record(record.dump());
}

int64_t records_bytes_through(const std::filesystem::path& path, int64_t step) {
  std::ifstream in(path, std::ios::binary);
  int64_t bytes = 0;
  std::string line;
  while (std::getline(in, line) && !in.eof()) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("step", step + 1) > step) break;
    bytes += static_cast<int64_t>(line.size()) + 1;
  }
  return bytes;
}

void train_loop(const RoleContext& ctx, engine::Model& model, engine::Optimizer& optimizer, Reducer& reducer,
                const LoopOptions& o) {
  const TrainConfig& cfg = ctx.config;
  const workloads::Workload& wl = *ctx.workload;
  const int64_t train_size = wl.train_size();
  const LoopPlan plan = plan_loop(cfg, train_size);
  if (o.ranks < 1 || cfg.batch % (o.ranks * o.micro_batches) != 0)
    throw std::invalid_argument("batch " + std::to_string(cfg.batch) + " does not split evenly over " +
                                std::to_string(o.ranks) + " ranks x " + std::to_string(o.micro_batches) +
                                " micro_batches");
  const int64_t per_rank = cfg.batch / o.ranks;
  const auto schedule = make_schedule(cfg.optimizer, cfg.schedule, cfg.batch, plan.total_steps);
  const std::vector<engine::Tensor> params = model.parameters();
  WholeModelStep whole_step(model, wl, reducer, o.local_batch);
  MicroStep& micro = o.micro_step ? *o.micro_step : whole_step;
  StepOptions step{.micro_batches = o.micro_batches, .lr = std::nullopt, .clip_grad_norm = cfg.clip_grad_norm,
                   .before_step = nullptr};

  Position pos;
  if (ctx.resume)
    if (auto p = load_checkpoint(o.checkpoint, model, optimizer)) pos = *p;
  if (o.on_start) o.on_start(pos);
  const std::filesystem::path records_file = records_path(ctx.arm_dir, ctx.role);
  JsonlWriter records(records_file.string(), ctx.resume ? std::optional<int64_t>(records_bytes_through(records_file, pos.step))
                                                        : std::nullopt);
  const double wall0 = pos.wall;
  Stopwatch clock;

  bool capped = false;
  for (int64_t epoch = pos.epochs_done; epoch < cfg.epochs && !capped; ++epoch) {
    const std::vector<int64_t> order = workloads::epoch_permutation(train_size, cfg.seed, epoch);
    for (int64_t b = 0; b < plan.steps_per_epoch; ++b) {
      model.train();
      step.lr = schedule->lr_at(pos.step);
      // This process's slice of the global batch.
      const std::span<const int64_t> mine(order.data() + b * cfg.batch + o.rank * per_rank,
                                          static_cast<size_t>(per_rank));
      const StepTimes t = train_step(wl, mine, epoch, params, optimizer, reducer, micro, step);

      pos.step += 1;
      pos.samples += cfg.batch;  // the arm's samples: every rank's slices of every step
      StepRecord r;
      r.step = pos.step;
      r.samples = pos.samples;
      r.epoch = static_cast<double>(pos.samples) / static_cast<double>(train_size);
      r.data = t.data;
      r.forward = t.forward;
      r.backward = t.backward;
      r.optimizer = t.optimizer;
      r.comm_exposed = t.comm_exposed;
      r.loss = t.loss;  // this process's slice
      r.lr = optimizer.lr();
      const nlohmann::json extra = o.record_step ? o.record_step(r, pos) : nlohmann::json::object();
      capped = cfg.max_steps > 0 && pos.step >= cfg.max_steps;
      const bool epoch_end = b + 1 == plan.steps_per_epoch || capped;
      // Every rank reaches the same points: the gather is collective.
      const bool point = epoch_end || evaluation_due(cfg, train_size, b * cfg.batch, (b + 1) * cfg.batch);
      const engine::MemStats train_mem = engine::memory_stats();
      if (point) reducer.gather_model();
      const bool evaluate = point && o.lead;
      finish_step(ctx, records, r, wall0, clock, evaluate, evaluate && o.whole_model ? o.whole_model() : model, extra,
                  train_mem);
      if (capped) break;
      if (point && !epoch_end) reducer.release_model();
    }
    if (!capped && o.checkpoints) {
      pos.epochs_done = epoch + 1;
      pos.wall = wall0 + clock.seconds();
      records.sync();  // the checkpoint never points past what a power loss keeps
      pos.records_bytes = records.bytes();
      pos.extra = o.checkpoint_extra;
      save_checkpoint(o.checkpoint, model, optimizer, pos);
    }
    if (!capped && epoch + 1 < cfg.epochs) reducer.release_model();
  }
  reducer.gather_model();
  if (o.lead)
    engine::save_safetensors(final_weights_path(ctx.arm_dir).string(),
                             (o.whole_model ? o.whole_model() : model).state_dict());
}

}  // namespace quartet::trainers

namespace quartet::trainers {

void train_locally(const RoleContext& ctx, int64_t micro_batches) {
  std::shared_ptr<engine::Model> model = load_initial_model(ctx);
  std::unique_ptr<engine::Optimizer> optimizer = make_optimizer(ctx.config.optimizer, model->parameters());
  Reducer alone;
  LoopOptions o;
  o.micro_batches = micro_batches;
  o.checkpoint = checkpoint_path(ctx.arm_dir);
  train_loop(ctx, *model, *optimizer, alone, o);
}

}  // namespace quartet::trainers

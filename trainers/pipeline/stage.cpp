// A pipeline stage process: trains its slice of the model's stages, one optimizer step
// per step over m micro-batches in the order its schedule says. Per step:
//
//   stage s-1 -> s   tensors  a micro-batch's activations at the cut     ("activations")
//   stage s -> s-1   tensors  their gradients                            ("gradients")
//   stage s -> s-1   control  StepDone: the step's mean loss, relayed     ("control")
//                             from the last stage once it has stepped
//
// and at every evaluation (each epoch's end, the last step) the stages' weights relay
// down to stage 0 ("weights"), which evaluates the whole model and at the end writes the
// arm's final weights. A Go relays from stage 0 to the last stage ("control") when stage 0
// has ended a step (the step's flush: every stage's step lasts as long as stage 0's, so
// each counts its idle tail) and, when training goes on, again once stage 0 has
// evaluated (so no stage counts the evaluation as its next step's idle time). Each stage loads the whole model's initial weights and frees those
// of the stages it does not run at once; a stage's weights come back only to relay the
// weights downstream of it (stage 0: to evaluate and write them), and go again after.
//
// Any failure closes the stage's links, so its neighbours' waits end at once and they
// fail in turn; a neighbour silent for step_timeout_s fails the stage.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include <cereal/types/string.hpp>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/safetensors.h"
#include "trainers/pipeline/links.h"
#include "trainers/pipeline/pipeline.h"
#include "trainers/split/protocol.h"
#include "trainers/training_loop.h"
#include "trainers/virtual_clients.h"
#include "transport/coordinator.h"
#include "transport/server.h"
#include "workloads/sampler.h"

namespace quartet::trainers::pipeline {
namespace {

using transport::MessageType;

// Tensors crossing one cut: the main path and its skip connections.
constexpr size_t kMaxCutTensors = 64;

struct StepDone {
  int64_t step = 0;
  double loss = 0.0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(step, loss);
  }
};

// Stage 0 has ended step `step` or, after an evaluation, goes on with the next.
struct Go {
  int64_t step = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(step);
  }
};

transport::Deadline deadline(double seconds) {
  return std::chrono::duration_cast<transport::Deadline>(std::chrono::duration<double>(seconds));
}

// Seconds to the microsecond: a timeline's times, short in the records.
double rounded(double seconds) { return std::round(seconds * 1e6) / 1e6; }

// The system clock, which the stage processes of one machine share: it lines up their
// timelines.
double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int64_t stage_of(const std::string& role, int64_t stages) {
  for (int64_t s = 0; s < stages; ++s)
    if (role == "stage" + std::to_string(s)) return s;
  throw std::invalid_argument("pipeline: no role \"" + role + "\"; the roles are stage0 to stage" +
                              std::to_string(stages - 1));
}

std::vector<int> range(int begin, int end) {
  std::vector<int> out;
  for (int i = begin; i < end; ++i) out.push_back(i);
  return out;
}

// A micro-batch between its forward and its backward.
struct InFlight {
  engine::TensorList inputs;   // stage 0: the batch; else the received activations (leaves)
  engine::TensorList outputs;  // what crossed the next cut; the last stage: the logits
  engine::Tensor loss;         // the last stage's
};

class Stage {
 public:
  Stage(const RoleContext& ctx, const Settings& s)
      : ctx_(ctx), s_(s), P_(s.stages()), stage_(stage_of(ctx.role, P_)), first_(stage_ == 0), last_(stage_ == P_ - 1),
        timeout_(deadline(s.step_timeout_s)), inbound_(stage_, P_, ctx.link) {}

  void run();

 private:
  void connect();
  void close_links();
  void train_step(const std::vector<int64_t>& order, int64_t b, int64_t epoch, StepRecord& r, nlohmann::json& info);
  void gather();
  void release_others();
  void go(const std::string& what);
  // The next tensors `in` has read; a failure names `what` was waited for.
  engine::TensorList take(Inbox& in, const std::string& what) {
    try {
      return in.take();
    } catch (const std::exception& e) {
      throw std::runtime_error("waiting for " + what + ": " + e.what());
    }
  }
  template <class Fn>
  auto receive(transport::Connection& conn, const char* kind, const std::string& what, Fn&& fn) {
    try {
      return count_received(conn, traffic_, kind, fn);
    } catch (const std::exception& e) {
      throw std::runtime_error("waiting for " + what + ": " + e.what());
    }
  }

  const RoleContext& ctx_;
  const Settings& s_;
  const int64_t P_, stage_;
  const bool first_, last_;
  const transport::Deadline timeout_;
  std::shared_ptr<engine::Model> model_;
  std::vector<int> bounds_;
  std::vector<engine::Tensor> params_;
  engine::NamedTensors downstream_;  // the state of the stages after this one's, released between gathers
  engine::NamedTensors upstream_;    // the state of the stages before this one's, always released
  std::unique_ptr<engine::Optimizer> optimizer_;
  std::vector<Op> ops_;
  split::Traffic traffic_;
  Inbound inbound_;
  transport::Connection* prev_ = nullptr;
  std::unique_ptr<transport::Connection> next_;
  std::unique_ptr<Outbox> to_prev_, to_next_;
  std::unique_ptr<Inbox> from_prev_, from_next_;  // activations, gradients: read as they arrive
  double lr_ = 0.0;
  int64_t step_ = 0;  // steps done
};

void Stage::close_links() {
  if (prev_) prev_->close();
  if (next_) next_->close();
}

void Stage::connect() {
  if (!first_) {
    if (!inbound_.wait(deadline(s_.join_timeout_s)))
      throw std::runtime_error("stage " + std::to_string(stage_ - 1) + " did not connect within " +
                               std::to_string(s_.join_timeout_s) + " s");
    prev_ = inbound_.wait(transport::Deadline::zero());
  }
  auto on_error = [this] { close_links(); };
  auto tensors = [this](transport::Connection& conn) {
    return split::receive_engine_tensors(conn, timeout_, kMaxCutTensors, ctx_.device);
  };
  if (prev_) {
    to_prev_ = std::make_unique<Outbox>(*prev_, traffic_, on_error);
    from_prev_ = std::make_unique<Inbox>(*prev_, traffic_, "activations", tensors, on_error);
  }
  if (next_) {
    to_next_ = std::make_unique<Outbox>(*next_, traffic_, on_error);
    from_next_ = std::make_unique<Inbox>(*next_, traffic_, "gradients", tensors, on_error);
  }
}

void Stage::train_step(const std::vector<int64_t>& order, int64_t b, int64_t epoch, StepRecord& r,
                       nlohmann::json& info) {
  const workloads::Workload& wl = *ctx_.workload;
  const int64_t batch = ctx_.config.batch, m = s_.micro_batches, micro = batch / m;
  const int lo = bounds_[static_cast<size_t>(stage_)], hi = bounds_[static_cast<size_t>(stage_) + 1];
  auto slice = [&](int64_t i) {
    const auto start = order.begin() + b * batch + i * micro;
    return std::vector<int64_t>(start, start + micro);
  };
  const split::Traffic::Count before = traffic_.total();
  Stopwatch wall;
  const double wall_start = unix_seconds();
  nlohmann::json timeline = nlohmann::json::array();  // [op, micro-batch, start, end], s from wall_start
  model_->train();
  for (engine::Tensor p : params_) p.zero_grad();
  optimizer_->zero_grad();
  // This step's activations and gradients are read as they arrive; what follows them on
  // the downstream connection (the step's end, weights) is read here, in turn.
  if (from_prev_) from_prev_->expect(m);
  if (from_next_) from_next_->expect(m);
  std::map<int64_t, InFlight> held;
  int64_t most_held = 0;
  double loss_sum = 0.0;
  const std::string step = "step " + std::to_string(step_ + 1);
  for (const Op& op : ops_) {
    const std::string mb = "micro-batch " + std::to_string(op.micro) + " of " + step;
    if (op.forward) {
      InFlight f;
      std::vector<int32_t> labels;
      if (!first_) {
        f.inputs = take(*from_prev_, "the activations of " + mb + " from stage " + std::to_string(stage_ - 1));
        for (engine::Tensor& a : f.inputs) {
          if (a.size(0) != micro)
            throw transport::MessageError("pipeline: activations " + engine::shape_str(a.shape()) +
                                          " for a micro-batch of " + std::to_string(micro));
          a.set_requires_grad(true);
        }
      }
      const double start = wall.seconds();
      if (first_ || last_) {
        // The last stage reads the labels of the same samples, in the same seeded order.
        Stopwatch c;
        workloads::Batch data = wl.train_batch(slice(op.micro), epoch);
        r.data += c.seconds();
        if (first_) f.inputs = {data.x.to(ctx_.device)};
        labels = std::move(data.y);
      }
      Stopwatch c;
      f.outputs = model_->forward_stages(f.inputs, lo, hi);
      if (last_) {
        if (f.outputs.size() != 1) throw std::runtime_error("pipeline: the model's last stage gives more than one tensor");
        f.loss = wl.loss(f.outputs[0], labels);
        loss_sum += f.loss.item();
      }
      r.forward += c.seconds();
      timeline.push_back({"F", op.micro, rounded(start), rounded(wall.seconds())});
      if (!last_)
        to_next_->post("activations", [outs = f.outputs, t = timeout_](transport::Connection& conn) {
          split::send_engine_tensors(conn, outs, "act", t);
        });
      held.emplace(op.micro, std::move(f));
      most_held = std::max(most_held, static_cast<int64_t>(held.size()));
    } else {
      const auto it = held.find(op.micro);
      if (it == held.end()) throw std::logic_error("pipeline: a backward before its forward");
      InFlight f = std::move(it->second);
      held.erase(it);
      engine::TensorList grads;
      if (!last_) {
        const std::string what = "the gradients of " + mb + " from stage " + std::to_string(stage_ + 1);
        grads = take(*from_next_, what);
        try {
          split::check_like(grads, f.outputs, next_->peer());
        } catch (const std::exception& e) {
          throw std::runtime_error("waiting for " + what + ": " + e.what());
        }
      }
      const double start = wall.seconds();
      Stopwatch c;
      if (last_) {
        engine::scale(f.loss, 1.0f / static_cast<float>(m)).backward();
      } else {
        engine::TensorList roots, seeds;
        for (size_t i = 0; i < f.outputs.size(); ++i)
          if (f.outputs[i].requires_grad()) {
            roots.push_back(f.outputs[i]);
            seeds.push_back(grads[i]);
          }
        if (!roots.empty()) engine::run_backward(roots, seeds);
      }
      engine::TensorList back;
      if (!first_) back = engine::grads_or_zeros(f.inputs);
      r.backward += c.seconds();
      timeline.push_back({"B", op.micro, rounded(start), rounded(wall.seconds())});
      if (!first_)
        to_prev_->post("gradients", [back, t = timeout_](transport::Connection& conn) {
          split::send_engine_tensors(conn, back, "grad", t);
        });
    }
  }
  const double step_start = wall.seconds();
  Stopwatch c;
  optimizer_->set_lr(static_cast<float>(lr_));
  optimizer_->step();
  r.optimizer = c.seconds();
  timeline.push_back({"S", -1, rounded(step_start), rounded(wall.seconds())});
  step_ += 1;
  // The step's loss comes back from the last stage, which has stepped by then.
  double loss = loss_sum / static_cast<double>(m);
  if (!last_) {
    const StepDone done = receive(*next_, "control", "the end of " + step + " from stage " + std::to_string(stage_ + 1),
                                  [&] { return transport::receive_message<StepDone>(*next_, MessageType::control, timeout_); });
    if (done.step != step_)
      throw transport::MessageError("pipeline: stage " + std::to_string(stage_ + 1) + " ended step " +
                                    std::to_string(done.step) + " during step " + std::to_string(step_));
    loss = done.loss;
  }
  if (!first_)
    to_prev_->post("control", [done = StepDone{step_, loss}, t = timeout_](transport::Connection& conn) {
      transport::send_message(conn, MessageType::control, done, t);
    });
  if (to_prev_) to_prev_->flush();
  go("ended " + step);
  const double seconds = wall.seconds();
  r.loss = loss;
  r.lr = optimizer_->lr();
  const double busy = r.data + r.forward + r.backward + r.optimizer;
  const double idle = std::max(0.0, seconds - busy);
  r.comm_exposed = idle;
  const split::Traffic::Count after = traffic_.total();
  const engine::MemStats mem = engine::memory_stats();
  info = {{"stage", stage_},
          {"stages", P_},
          {"first", model_->stage_names()[static_cast<size_t>(lo)]},
          {"last", model_->stage_names()[static_cast<size_t>(hi - 1)]},
          {"schedule", s_.schedule},
          {"micro_batches", m},
          {"busy", busy},
          {"idle", idle},
          {"step_wall", seconds},
          {"idle_fraction", seconds > 0.0 ? idle / seconds : 0.0},
          {"bubble_formula", bubble_fraction(P_, m)},
          {"in_flight_peak", most_held},
          {"activations_peak", mem.peak[static_cast<size_t>(engine::MemTag::activations)]},
          {"step_bytes_sent", after.sent - before.sent},
          {"step_bytes_received", after.received - before.received},
          {"step_messages", after.messages - before.messages},
          {"timeline_start", wall_start},
          {"timeline", std::move(timeline)}};
}

// The stages' weights relay down to stage 0: each stage takes its downstream stages'
// state from its neighbour and passes it on with its own. Their storage comes back for
// the relay (and stage 0's evaluation) and goes again with release_others().
void Stage::gather() {
  const int lo = bounds_[static_cast<size_t>(stage_)];
  const int n = bounds_.back();
  if (!last_) {
    for (auto& [name, t] : downstream_) t.materialize_storage();
    receive(*next_, "weights", "the weights of stages after " + std::to_string(stage_), [&] {
      split::receive_state(*next_, downstream_, timeout_);
      return 0;
    });
  }
  if (!first_) {
    to_prev_->post("weights", [state = split::stages_state(*model_, range(lo, n)), t = timeout_](
                                  transport::Connection& conn) { split::send_state(conn, state, t); });
    to_prev_->flush();
  }
}

// Waits until stage 0 has said `what` (it is stage 0, or the stage before passed it on)
// and passes it on downstream.
void Stage::go(const std::string& what) {
  if (!first_) {
    const Go g = receive(*prev_, "control", "stage 0 to say it " + what,
                         [&] { return transport::receive_message<Go>(*prev_, MessageType::control, timeout_); });
    if (g.step != step_)
      throw transport::MessageError("pipeline: stage 0 " + what + " at step " + std::to_string(g.step) +
                                    " while this stage is at step " + std::to_string(step_));
  }
  if (!last_) {
    to_next_->post("control", [g = Go{step_}, t = timeout_](transport::Connection& conn) {
      transport::send_message(conn, MessageType::control, g, t);
    });
    to_next_->flush();
  }
}

// Frees the weights of the stages this process does not run; the peaks restart from what
// training holds, as after an evaluation.
void Stage::release_others() {
  for (auto* state : {&upstream_, &downstream_})
    for (auto& [name, t] : *state)
      if (t.resident()) t.release_storage();
  engine::reset_memory_peaks();
}

void Stage::run() {
  if (!ctx_.coordinator) throw std::invalid_argument("pipeline: a stage needs the run's coordinator to find its neighbours");
  const workloads::Workload& wl = *ctx_.workload;
  const TrainConfig& cfg = ctx_.config;
  model_ = load_initial_model(ctx_);
  bounds_ = stage_bounds(model_->stage_names(), s_);
  const int lo = bounds_[static_cast<size_t>(stage_)], hi = bounds_[static_cast<size_t>(stage_) + 1];
  params_ = split::stages_parameters(*model_, range(lo, hi));
  upstream_ = split::stages_state(*model_, range(0, lo));
  downstream_ = split::stages_state(*model_, range(hi, bounds_.back()));
  release_others();
  optimizer_ = make_optimizer(cfg.optimizer, params_);
  ops_ = stage_schedule(s_.schedule, stage_, P_, s_.micro_batches);
  const LoopPlan plan = plan_loop(cfg, wl.train_size());
  const auto schedule = make_schedule(cfg.optimizer, cfg.schedule, cfg.batch, plan.total_steps);

  std::unique_ptr<transport::Server> server;
  if (!first_) {
    transport::ServerOptions so;
    so.address = ctx_.coordinator->options().host;
    so.token = transport::make_token();
    so.tls = ctx_.coordinator->options().tls;
    so.max_connections = 4;
    const std::string role = ctx_.role;
    so.log = [role](const std::string& line) { std::fprintf(stderr, "pipeline %s: %s\n", role.c_str(), line.c_str()); };
    server = std::make_unique<transport::Server>(
        so, [this](transport::Connection& c, const transport::Hello& h) { inbound_.handle(c, h); });
    ctx_.coordinator->kv_set(stage_token_key(ctx_.arm, stage_), so.token);
    ctx_.coordinator->kv_set(stage_address_key(ctx_.arm, stage_), so.address + ":" + std::to_string(server->port()));
  }
  // However the stage ends, the parked handler is let go before the server joins it, and
  // the outboxes stop before the connections they send on go.
  const ReleaseOnExit release([this] { inbound_.release(); });
  struct StopOutboxes {
    Stage& s;
    ~StopOutboxes() {
      s.from_prev_.reset();
      s.from_next_.reset();
      s.to_prev_.reset();
      s.to_next_.reset();
    }
  } stop_outboxes{*this};

  try {
    if (!last_) next_ = connect_downstream(ctx_, stage_ + 1, s_.join_timeout_s);
    connect();
    // A pipeline arm has no checkpoint: a resumed run starts it over, records included.
    JsonlWriter records(records_path(ctx_.arm_dir, ctx_.role).string(), int64_t{0});
    Stopwatch clock;
    Position pos;
    bool capped = false;
    for (int64_t epoch = 0; epoch < cfg.epochs && !capped; ++epoch) {
      const std::vector<int64_t> order = workloads::epoch_permutation(wl.train_size(), cfg.seed, epoch);
      for (int64_t b = 0; b < plan.steps_per_epoch; ++b) {
        lr_ = schedule->lr_at(pos.step);
        StepRecord r;
        nlohmann::json info;
        train_step(order, b, epoch, r, info);
        pos.step += 1;
        pos.samples += cfg.batch;
        r.step = pos.step;
        r.samples = pos.samples;
        r.epoch = static_cast<double>(pos.samples) / static_cast<double>(wl.train_size());
        capped = cfg.max_steps > 0 && pos.step >= cfg.max_steps;
        const bool evaluate = b + 1 == plan.steps_per_epoch || capped ||
                              evaluation_due(cfg, wl.train_size(), b * cfg.batch, (b + 1) * cfg.batch);
        const bool final_step = capped || (evaluate && epoch + 1 == cfg.epochs);
        // The step's training memory, before the relay brings other stages' weights back.
        const engine::MemStats train_mem = engine::memory_stats();
        if (evaluate) gather();
        const split::Traffic::Count total = traffic_.total();
        r.bytes_sent = total.sent;
        r.bytes_received = total.received;
        r.messages = total.messages;
        info["traffic"] = traffic_.to_json();
        finish_step(ctx_, records, r, 0.0, clock, evaluate && first_, *model_, {{"pipeline", info}}, train_mem);
        if (final_step && first_)
          engine::save_safetensors(final_weights_path(ctx_.arm_dir).string(), model_->state_dict());
        if (evaluate) release_others();
        if (evaluate && !final_step) go("evaluated after step " + std::to_string(step_));
        if (capped) break;
      }
    }
  } catch (const std::exception& e) {
    close_links();
    throw std::runtime_error("pipeline " + ctx_.role + ": " + e.what());
  }
}

}  // namespace

void run_stage(const RoleContext& ctx, const Settings& settings) { Stage(ctx, settings).run(); }

}  // namespace quartet::trainers::pipeline

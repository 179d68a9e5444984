// The split server: holds the whole model (its own stages trained here; the client
// stages hold the latest client half handed back, for the hand-over and evaluation),
// gives clients their turns, and serves each step of a turn on that client's connection.
//
// vanilla, ushaped: epoch after epoch, client after client, one shared server half.
// splitfed: every client's turn at once; the client halves are averaged (FedAvg by
// partition size) every epoch, and the server half is either one per client, averaged
// likewise (SFLv1, server_halves "per_client"), or one shared by every client, stepped
// by each client's steps as they come (SFLv2, "shared").
//
// A client that fails or disconnects mid-turn loses that turn: the step in flight is
// dropped before the server half steps (gradients are sent before the step), the client
// half it was training is discarded, and the next client starts from the last one
// handed back. Nothing else is lost.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "engine/autograd.h"
#include "engine/safetensors.h"
#include "trainers/federated/client.h"
#include "trainers/federated/strategy.h"
#include "trainers/training_loop.h"
#include "trainers/metrics.h"
#include "trainers/split/split.h"
#include "trainers/split/protocol.h"
#include "trainers/virtual_clients.h"
#include "transport/coordinator.h"
#include "transport/server.h"
#include "workloads/sampler.h"

namespace quartet::trainers::split {
namespace {

using namespace std::chrono_literals;
using transport::MessageType;
constexpr size_t kMaxCutTensors = 64;

void log(const std::string& line) {
  std::fprintf(stderr, "split server: %s\n", line.c_str());
  std::fflush(stderr);
}

// The connections of the virtual clients. A connection's handler thread only parks
// here; the turns use the connection from the round loop's threads.
struct Slots {
  explicit Slots(int64_t clients) : conns(static_cast<size_t>(clients), nullptr) {}
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<transport::Connection*> conns;
  bool stopping = false;
  std::string failure;  // why a client's connection could not be served (no thread for it)

  void fail(const std::string& why) {
    {
      std::lock_guard lock(mutex);
      if (failure.empty()) failure = why;
    }
    cv.notify_all();
  }

  void handle(transport::Connection& conn, const transport::Hello& hello, const std::string& link) {
    const int64_t client = parse_client_role(hello.role, kClientRolePrefix);
    conn.set_link(transport::link_profile(link));
    {
      std::lock_guard lock(mutex);
      if (client < 0 || client >= static_cast<int64_t>(conns.size()) || conns[client]) {
        log("refused " + conn.peer() + ": no such client or already connected: " + hello.role);
        transport::send_error_and_close(conn, "split server: no such client or already connected: " + hello.role, 5s);
        return;
      }
    }
    // Welcome before the connection is visible to the round loop, which may start a turn at once.
    transport::send_message(conn, MessageType::welcome,
                            transport::Welcome{static_cast<int32_t>(client), static_cast<int32_t>(conns.size()), "{}"},
                            30s);
    std::unique_lock lock(mutex);
    conns[client] = &conn;
    cv.notify_all();
    cv.wait(lock, [&] { return stopping || conns[client] != &conn; });
    if (conns[client] == &conn) {  // stopping: the run is over for this client
      conns[client] = nullptr;
      lock.unlock();
      try {
        conn.send(MessageType::shutdown, std::span<const std::byte>{}, 5s);
      } catch (const std::exception&) {
      }
    }
  }

  transport::Connection* get(int64_t client) {
    std::lock_guard lock(mutex);
    return conns[static_cast<size_t>(client)];
  }

  // A failed turn: the connection is closed and its handler returns.
  void drop(int64_t client, transport::Connection* conn) {
    conn->close();
    std::lock_guard lock(mutex);
    if (conns[static_cast<size_t>(client)] == conn) conns[static_cast<size_t>(client)] = nullptr;
    cv.notify_all();
  }

  void stop() {
    std::lock_guard lock(mutex);
    stopping = true;
    cv.notify_all();
  }
};

// The server side of one client's turn.
struct TurnOutcome {
  int64_t client = 0;
  bool ok = false;
  std::string error;
  TurnDone done;
  federated::Params client_half;  // handed back
  federated::Params server_half;  // splitfed per_client: this client's server half after the turn
  std::shared_ptr<Traffic> traffic = std::make_shared<Traffic>();
  int64_t steps = 0;       // completed on the server
  int64_t planned_steps = 0;  // the turn's steps, had none been lost
  double loss_sum = 0.0;
  double forward = 0.0, backward = 0.0, optimizer = 0.0;  // server compute, seconds
  std::vector<engine::Shape> cut_shapes;  // what crossed the cut (U-shaped: both cuts), per step
  int64_t cut_floats_per_sample = 0;      // summed over those tensors
  int64_t memory_peak = 0;
};

federated::Params flatten(const engine::NamedTensors& state) {
  federated::Params p;
  for (const auto& [name, t] : state) p.push_back(t.to_vector());
  return p;
}

void assign(engine::NamedTensors& state, const federated::Params& p) {
  for (size_t i = 0; i < state.size(); ++i) state[i].second.copy_from_host(p[i]);
}

engine::NamedTensors cloned(const engine::NamedTensors& state) {
  engine::NamedTensors out;
  for (const auto& [name, t] : state) out.emplace_back(name, t.clone());
  return out;
}

class SplitServer {
 public:
  SplitServer(const RoleContext& ctx, const Settings& s) : ctx_(ctx), s_(s), slots_(s.clients) {}

  void run();

 private:
  // The server half one turn trains: the main model's (shared) or a copy (per client).
  struct Half {
    engine::Model* model = nullptr;
    engine::Optimizer* optimizer = nullptr;
    bool shared = false;  // held for a whole step: other clients step the same weights
  };

  TurnOutcome run_turn(int64_t client, const Turn& turn, const engine::NamedTensors& start, Half half);
  void serve_step(transport::Connection& conn, const Turn& turn, int64_t i, Half half, TurnOutcome& out);
  nlohmann::json turn_json(const TurnOutcome& o) const;

  const RoleContext& ctx_;
  const Settings& s_;
  Slots slots_;
  Cut cut_;
  std::shared_ptr<engine::Model> model_;
  std::mutex compute_mutex_;  // one server computation at a time (compute threads are shared)
  std::mutex shared_half_mutex_;
  std::vector<int> client_stages_, server_stages_;
  int64_t client_half_floats_ = 0;
};

void SplitServer::serve_step(transport::Connection& conn, const Turn& turn, int64_t i, Half half, TurnOutcome& out) {
  const workloads::Workload& wl = *ctx_.workload;
  const auto timeout = std::chrono::duration_cast<transport::Deadline>(std::chrono::duration<double>(s_.step_timeout_s));
  Traffic& traffic = *out.traffic;
  engine::TensorList acts = traffic.count(conn, "activations",
                                    [&] { return receive_engine_tensors(conn, timeout, kMaxCutTensors, ctx_.device); });
  for (const engine::Tensor& a : acts)
    if (a.size(0) != turn.batch)
      throw transport::MessageError("split: activations " + engine::shape_str(a.shape()) + " for a batch of " +
                                    std::to_string(turn.batch));
  if (i == 0) {
    out.cut_shapes.clear();
    out.cut_floats_per_sample = 0;
    for (const engine::Tensor& a : acts) {
      out.cut_shapes.push_back(a.shape());
      out.cut_floats_per_sample += a.numel() / turn.batch;
    }
  }
  std::vector<int32_t> labels;
  if (!cut_.ushaped) {
    labels = traffic.count(conn, "labels",
                     [&] { return transport::receive_message<Labels>(conn, MessageType::control, timeout).labels; });
    const int classes = wl.label_classes();
    // turn.batch is the server's own (at most the training set), so the product is bounded.
    const int64_t expected = turn.batch * wl.labels_per_sample();
    if (static_cast<int64_t>(labels.size()) != expected)
      throw transport::MessageError("split: " + std::to_string(labels.size()) + " labels for a batch of " +
                                    std::to_string(turn.batch) + " (expected " + std::to_string(expected) + ", " +
                                    std::to_string(wl.labels_per_sample()) + " per sample)");
    for (int32_t y : labels)
      if (y < 0 || y >= classes)
        throw transport::MessageError("split: label " + std::to_string(y) + " outside [0, " + std::to_string(classes) + ")");
  }

  std::unique_lock<std::mutex> step_lock;
  if (half.shared) step_lock = std::unique_lock(shared_half_mutex_);
  engine::Model& model = *half.model;
  engine::Optimizer& opt = *half.optimizer;
  engine::TensorList grads;
  {
    std::unique_lock compute(compute_mutex_);
    Stopwatch t;
    model.train();
    opt.zero_grad();
    for (engine::Tensor& a : acts) a.set_requires_grad(true);
    const engine::TensorList outs = model.forward_stages(acts, cut_.lower, cut_.upper);
    if (!cut_.ushaped) {
      if (outs.size() != 1) throw std::runtime_error("split: the model's last stage gives more than one tensor");
      const engine::Tensor loss = wl.loss(outs[0], labels);
      out.forward += t.seconds();
      t.restart();
      loss.backward();
      out.loss_sum += loss.item();
      grads = engine::grads_or_zeros(acts);
      out.backward += t.seconds();
    } else {
      out.forward += t.seconds();
      compute.unlock();
      if (i == 0)
        for (const engine::Tensor& o : outs) {
          out.cut_shapes.push_back(o.shape());
          out.cut_floats_per_sample += o.numel() / turn.batch;
        }
      traffic.count(conn, "activations", [&] { send_engine_tensors(conn, outs, "cut", timeout); });
      const engine::TensorList back = traffic.count(
          conn, "gradients", [&] { return receive_engine_tensors(conn, timeout, kMaxCutTensors, ctx_.device, outs); });
      compute.lock();
      t.restart();
      engine::TensorList roots, seeds;
      for (size_t k = 0; k < outs.size(); ++k)
        if (outs[k].requires_grad()) {
          roots.push_back(outs[k]);
          seeds.push_back(back[k]);
        }
      if (!roots.empty()) engine::run_backward(roots, seeds);
      grads = engine::grads_or_zeros(acts);
      out.backward += t.seconds();
    }
  }
  // Gradients out before the step: a client gone by now costs this step nothing.
  traffic.count(conn, "gradients", [&] { send_engine_tensors(conn, grads, "grad", timeout); });
  std::lock_guard compute(compute_mutex_);
  Stopwatch t;
  opt.set_lr(static_cast<float>(turn.lrs[static_cast<size_t>(i)]));
  opt.step();
  out.optimizer += t.seconds();
  out.steps += 1;
}

TurnOutcome SplitServer::run_turn(int64_t client, const Turn& turn, const engine::NamedTensors& start, Half half) {
  TurnOutcome out;
  out.client = client;
  out.planned_steps = turn.steps;
  transport::Connection* conn = slots_.get(client);
  if (!conn) {
    out.error = "not connected";
    return out;
  }
  const auto timeout = std::chrono::duration_cast<transport::Deadline>(std::chrono::duration<double>(s_.step_timeout_s));
  Traffic& traffic = *out.traffic;
  try {
    traffic.count(*conn, "control", [&] { transport::send_message(*conn, MessageType::control, turn, timeout); });
    traffic.count(*conn, "weights", [&] { send_state(*conn, start, timeout); });
    for (int64_t i = 0; i < turn.steps; ++i) serve_step(*conn, turn, i, half, out);
    engine::NamedTensors back = cloned(start);
    traffic.count(*conn, "weights", [&] { receive_state(*conn, back, timeout); });
    out.done = traffic.count(*conn, "control",
                       [&] { return transport::receive_message<TurnDone>(*conn, MessageType::control, timeout); });
    if (out.done.client != client || out.done.epoch != turn.epoch || out.done.steps != turn.steps)
      throw transport::MessageError("split: client " + std::to_string(client) + " reported " +
                                    std::to_string(out.done.steps) + " steps of client " +
                                    std::to_string(out.done.client) + " in epoch " + std::to_string(out.done.epoch));
    out.client_half = flatten(back);
    if (!half.shared) out.server_half = flatten(stages_state(*half.model, server_stages_));
    out.ok = true;
  } catch (const std::exception& e) {
    out.error = e.what();
    log("client " + std::to_string(client) + " loses its turn in epoch " + std::to_string(turn.epoch) + " after " +
        std::to_string(out.steps) + " of " + std::to_string(turn.steps) + " steps: " + e.what());
    slots_.drop(client, conn);
  }
  out.memory_peak = engine::memory_stats().total_peak;
  return out;
}

nlohmann::json SplitServer::turn_json(const TurnOutcome& o) const {
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& s : o.cut_shapes) shapes.push_back(s);
  const int64_t batch = ctx_.config.batch;
  return {{"client", o.client},
          {"ok", o.ok},
          {"error", o.error},
          {"steps", o.steps},
          {"cut", {{"shapes", shapes}, {"floats_per_sample", o.cut_floats_per_sample},
                   {"bytes_per_step", o.cut_floats_per_sample * batch * 4}}},
          {"traffic", o.traffic->to_json()},
          {"analytic_bytes", o.ok ? analytic_turn_bytes(o.steps, batch, o.cut_floats_per_sample,
                                                        cut_.ushaped ? 0 : ctx_.workload->labels_per_sample(),
                                                        client_half_floats_)
                                  : 0},
          {"client_compute", {{"forward", o.done.forward}, {"backward", o.done.backward},
                              {"optimizer", o.done.optimizer}, {"data", o.done.data}}},
          {"server_compute", {{"forward", o.forward}, {"backward", o.backward}, {"optimizer", o.optimizer}}},
          {"client_memory_peak", o.done.memory_peak},
          {"client_rss_peak", o.done.rss_peak},
          {"server_memory_peak", o.memory_peak}};
}

void SplitServer::run() {
  if (!ctx_.coordinator) throw std::invalid_argument("split server: needs the run's coordinator for rendezvous");
  const workloads::Workload& wl = *ctx_.workload;
  const TrainConfig& cfg = ctx_.config;
  if (cfg.clip_grad_norm > 0.0)
    throw std::invalid_argument("split: clip_grad_norm is not supported (the norm would span both sides of the cut)");
  const workloads::Partition partition = client_partition(s_.partition, s_.clients, cfg.seed, wl);
  model_ = load_initial_model(ctx_);
  cut_ = resolve_cut(model_->stage_names(), s_);
  client_stages_ = cut_.client_stages();
  server_stages_ = cut_.server_stages();
  engine::NamedTensors client_half = stages_state(*model_, client_stages_);
  for (const auto& [n, t] : client_half) client_half_floats_ += t.numel();
  std::unique_ptr<engine::Optimizer> server_opt =
      make_optimizer(cfg.optimizer, stages_parameters(*model_, server_stages_));

  // Steps per turn: each client's full batches, capped by max_steps overall.
  std::vector<int64_t> steps_of(static_cast<size_t>(s_.clients));
  int64_t steps_per_epoch = 0, longest = 0;
  for (int64_t c = 0; c < s_.clients; ++c) {
    steps_of[c] = workloads::batches_per_epoch(static_cast<int64_t>(partition.clients[c].size()), cfg.batch);
    steps_per_epoch += steps_of[c];
    longest = std::max(longest, steps_of[c]);
  }
  if (longest == 0)
    throw std::invalid_argument("split: batch " + std::to_string(cfg.batch) + " is larger than every client's partition");
  const bool parallel = s_.variant == "splitfed";
  int64_t total_steps = cfg.epochs * (parallel ? longest : steps_per_epoch);
  if (cfg.max_steps > 0) total_steps = std::min(total_steps, cfg.max_steps);
  const auto schedule = make_schedule(cfg.optimizer, cfg.schedule, cfg.batch, total_steps);

  // A split arm has no checkpoint: a resumed run starts it over, records included.
  JsonlWriter records(records_path(ctx_.arm_dir, ctx_.role).string(), int64_t{0});
  Stopwatch clock;
  transport::ServerOptions so;
  so.address = ctx_.coordinator->options().host;
  so.token = transport::make_token();
  so.tls = ctx_.coordinator->options().tls;
  so.max_connections = static_cast<size_t>(s_.clients) + 16;
  so.log = [](const std::string& line) { log(line); };
  // A client that cannot be served fails the arm now, not after join_timeout_s.
  so.on_thread_failure = [this](const std::string& why) { slots_.fail(why); };
  transport::Server server(so, [this](transport::Connection& c, const transport::Hello& h) {
    slots_.handle(c, h, ctx_.link);
  });
  // However the epochs end, the handlers parked on the clients' connections are released
  // before the server joins them.
  const ReleaseOnExit release([this] { slots_.stop(); });
  ctx_.coordinator->kv_set(server_token_key(ctx_.arm), so.token);
  ctx_.coordinator->kv_set(server_address_key(ctx_.arm), so.address + ":" + std::to_string(server.port()));
  {
    std::unique_lock lock(slots_.mutex);
    slots_.cv.wait_for(lock, std::chrono::duration<double>(s_.join_timeout_s), [&] {
      return !slots_.failure.empty() ||
             std::all_of(slots_.conns.begin(), slots_.conns.end(), [](auto* c) { return c != nullptr; });
    });
    if (!slots_.failure.empty()) throw std::runtime_error("split server: " + slots_.failure);
  }

  Position pos;
  int64_t bytes_sent = 0, bytes_received = 0, messages = 0;
  int64_t planned_samples = 0;  // what the turns so far would have trained had none been lost
  const int64_t train_size = wl.train_size();
  auto base_record = [&](const std::vector<const TurnOutcome*>& turns, int64_t epoch) {
    StepRecord r;
    double loss_sum = 0.0;
    int64_t steps = 0;
    for (const TurnOutcome* o : turns) planned_samples += o->planned_steps * cfg.batch;
    for (const TurnOutcome* o : turns) {
      const Traffic::Count t = o->traffic->total();
      bytes_sent += t.sent;
      bytes_received += t.received;
      messages += t.messages;
      loss_sum += cut_.ushaped ? o->done.loss_sum : o->loss_sum;
      steps += o->steps;
      pos.samples += o->steps * cfg.batch;
      r.forward += o->forward + o->done.forward;
      r.backward += o->backward + o->done.backward;
      r.optimizer += o->optimizer + o->done.optimizer;
      r.data += o->done.data;
    }
    r.step = pos.step;
    r.samples = pos.samples;
    r.epoch = static_cast<double>(pos.samples) / static_cast<double>(train_size);
    r.loss = steps > 0 ? loss_sum / static_cast<double>(steps) : 0.0;
    r.lr = schedule->lr_at(std::max<int64_t>(0, pos.step - 1));
    r.bytes_sent = bytes_sent;
    r.bytes_received = bytes_received;
    r.messages = messages;
    nlohmann::json detail = nlohmann::json::array();
    for (const TurnOutcome* o : turns) detail.push_back(turn_json(*o));
    nlohmann::json cuts = s_.stage_cuts();
    nlohmann::json extra = {{"split", {{"variant", s_.variant},
                                       {"cuts", cuts},
                                       {"server_halves", parallel ? s_.server_halves.value_or("") : ""},
                                       {"epoch", epoch},
                                       {"client_half_bytes", client_half_floats_ * 4},
                                       {"turns", detail}}},
                           {"planned_samples", planned_samples}};
    // A step with a lost turn is a degraded step.
    for (const TurnOutcome* o : turns)
      if (!o->ok) {
        extra["degraded"] = "epoch " + std::to_string(epoch) + ": client " + std::to_string(o->client) +
                            " lost its turn: " + o->error;
        break;
      }
    return std::pair{r, extra};
  };

  bool capped = false;
  for (int64_t epoch = 0; epoch < cfg.epochs && !capped; ++epoch) {
    const int64_t epoch_start = pos.samples;
    if (!parallel) {
      for (int64_t c = 0; c < s_.clients && !capped; ++c) {
        Turn turn{epoch, c, steps_of[c], cfg.batch, {}, false};
        if (cfg.max_steps > 0) turn.steps = std::min(turn.steps, cfg.max_steps - pos.step);
        for (int64_t i = 0; i < turn.steps; ++i) turn.lrs.push_back(schedule->lr_at(pos.step + i));
        TurnOutcome o = run_turn(c, turn, client_half, Half{model_.get(), server_opt.get(), true});
        if (o.ok) assign(client_half, o.client_half);  // handed on to the next client
        pos.step += o.steps;
        capped = cfg.max_steps > 0 && pos.step >= cfg.max_steps;
        const bool last = c + 1 == s_.clients || capped;
        const int64_t before = pos.samples - epoch_start;
        auto [r, extra] = base_record({&o}, epoch);
        // A turn is the finest step here: the first turn's end past each evaluation point.
        const bool due = evaluation_due(cfg, train_size, before, pos.samples - epoch_start);
        finish_step(ctx_, records, r, 0.0, clock, last || due, *model_, extra);
      }
    } else {
      // Every client at once; the client halves (and per-client server halves) averaged.
      const int64_t steps = cfg.max_steps > 0 ? std::min(longest, cfg.max_steps - pos.step) : longest;
      std::vector<TurnOutcome> outs(static_cast<size_t>(s_.clients));
      std::vector<std::shared_ptr<engine::Model>> copies(static_cast<size_t>(s_.clients));
      std::vector<std::unique_ptr<engine::Optimizer>> copy_opts(static_cast<size_t>(s_.clients));
      const bool shared = s_.server_halves.value_or("") == "shared";
      std::vector<std::thread> threads;
      for (int64_t c = 0; c < s_.clients; ++c) {
        Turn turn{epoch, c, std::min(steps_of[c], steps), cfg.batch, {}, true};
        for (int64_t i = 0; i < turn.steps; ++i) turn.lrs.push_back(schedule->lr_at(pos.step + i));
        Half half{model_.get(), server_opt.get(), true};
        if (!shared) {
          copies[c] = make_model(ctx_);
          engine::NamedTensors dst = copies[c]->state_dict();
          assign(dst, flatten(model_->state_dict()));
          copy_opts[c] = make_optimizer(cfg.optimizer, stages_parameters(*copies[c], server_stages_));
          half = Half{copies[c].get(), copy_opts[c].get(), false};
        }
        threads.emplace_back([this, &outs, c, turn, &client_half, half] {
          outs[c] = run_turn(c, turn, client_half, half);
        });
      }
      for (std::thread& t : threads) t.join();
      std::vector<federated::ClientResult> client_results, server_results;
      std::vector<const TurnOutcome*> turns;
      for (TurnOutcome& o : outs) {
        turns.push_back(&o);
        if (!o.ok) continue;
        client_results.push_back({o.client, o.done.samples, std::move(o.client_half)});
        if (!shared) server_results.push_back({o.client, o.done.samples, std::move(o.server_half)});
      }
      if (!client_results.empty()) {
        assign(client_half, federated::weighted_average(client_results));
        if (!shared) {
          engine::NamedTensors server_half = stages_state(*model_, server_stages_);
          assign(server_half, federated::weighted_average(server_results));
        }
      }
      pos.step += steps;
      capped = cfg.max_steps > 0 && pos.step >= cfg.max_steps;
      auto [r, extra] = base_record(turns, epoch);
      finish_step(ctx_, records, r, 0.0, clock, true, *model_, extra);
    }
  }
  engine::save_safetensors(final_weights_path(ctx_.arm_dir).string(), model_->state_dict());
  slots_.stop();
  server.stop();
}

}  // namespace

void run_server(const RoleContext& ctx, const Settings& settings) { SplitServer(ctx, settings).run(); }

}  // namespace quartet::trainers::split

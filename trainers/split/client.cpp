// A split pool process: hosts virtual clients, each with its own connection to the
// server, its own partition, and its own copy of the client half (with its optimizer,
// kept between a vanilla or U-shaped client's turns). Clients of one pool compute one at a
// time (the pool's compute threads are shared); they wait for the server in parallel.

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "engine/autograd.h"
#include "engine/safetensors.h"
#include "trainers/metrics.h"
#include "trainers/split/split.h"
#include "trainers/split/protocol.h"
#include "trainers/training_loop.h"
#include "trainers/virtual_clients.h"
#include "transport/coordinator.h"
#include "workloads/models.h"
#include "workloads/sampler.h"

namespace quartet::trainers::split {
namespace {

using namespace std::chrono_literals;
using transport::MessageType;

// Tensors crossing one cut: the main path and its skip connections.
constexpr size_t kMaxCutTensors = 64;

// What a virtual client keeps between its turns: its optimizer's state (momentum, Adam's
// moments) for its half. The half itself comes from the server at every turn, and the
// model that computes it exists only during the turn, so a pool holds one model per
// client training at that moment (vanilla and U-shaped: one), not one per client.
struct ClientState {
  std::optional<engine::NamedTensors> optimizer_state;
};

struct Pool {
  const RoleContext& ctx;
  const Settings& settings;
  workloads::Partition partition;
  Cut cut;
  std::mutex compute_mutex;
  std::mutex records_mutex;
  std::unique_ptr<JsonlWriter> records;
};

transport::Deadline step_timeout(const Settings& s) {
  return std::chrono::duration_cast<transport::Deadline>(std::chrono::duration<double>(s.step_timeout_s));
}

// The lower half's backward, from every tensor that crossed the cut and needs a gradient
// (a skip tensor that is the raw input needs none).
void backward_from_cut(const engine::TensorList& outs, const engine::TensorList& grads) {
  engine::TensorList roots, seeds;
  for (size_t i = 0; i < outs.size(); ++i)
    if (outs[i].requires_grad()) {
      roots.push_back(outs[i]);
      seeds.push_back(grads[i]);
    }
  if (!roots.empty()) engine::run_backward(roots, seeds);
}

// A client's micro-step: forward to the cut, the activations (and labels) out; U-shaped,
// the server's activations in and the tail and loss here; then backward from the
// gradients that come back. The pool's compute lock is let go while it waits.
class CutStep final : public MicroStep {
 public:
  CutStep(engine::Model& model, const Cut& cut, transport::Connection& conn, Traffic& traffic,
          transport::Deadline timeout, const workloads::Workload& wl, const engine::Device& device)
      : model_(model), cut_(cut), conn_(conn), traffic_(traffic), timeout_(timeout), wl_(wl), device_(device) {}

  // Whole batches only: the gradient that comes back is the server's, unscaled.
  double run(const workloads::Batch& batch, float /*scale*/, StepTimes& t) override {
    Stopwatch clock;
    const engine::TensorList outs = model_.forward_stages({batch.x.to(device_)}, 0, cut_.lower);
    t.forward += clock.seconds();
    compute->unlock();
    traffic_.count(conn_, "activations", [&] { send_engine_tensors(conn_, outs, "cut", timeout_); });
    double loss_value = 0.0;
    if (!cut_.ushaped) {
      traffic_.count(conn_, "labels",
                     [&] { transport::send_message(conn_, MessageType::control, Labels{batch.y}, timeout_); });
    } else {
      // The tail: activations at the second cut in, loss here, their gradients out.
      engine::TensorList mids = traffic_.count(
          conn_, "activations", [&] { return receive_engine_tensors(conn_, timeout_, kMaxCutTensors, device_); });
      compute->lock();
      clock.restart();
      for (engine::Tensor& m : mids) m.set_requires_grad(true);
      const engine::TensorList tail = model_.forward_stages(mids, cut_.upper, cut_.stages);
      if (tail.size() != 1) throw std::runtime_error("split: the model's last stage gives more than one tensor");
      const engine::Tensor loss = wl_.loss(tail[0], batch.y);
      t.forward += clock.seconds();
      clock.restart();
      loss.backward();
      loss_value = loss.item();
      engine::TensorList mid_grads;
      for (const engine::Tensor& m : mids)
        mid_grads.push_back(m.grad().defined() ? m.grad() : engine::Tensor::zeros(m.shape(), m.device()));
      t.backward += clock.seconds();
      compute->unlock();
      traffic_.count(conn_, "gradients", [&] { send_engine_tensors(conn_, mid_grads, "grad", timeout_); });
    }
    const engine::TensorList grads = traffic_.count(
        conn_, "gradients", [&] { return receive_engine_tensors(conn_, timeout_, kMaxCutTensors, device_, outs); });
    compute->lock();
    clock.restart();
    backward_from_cut(outs, grads);
    t.backward += clock.seconds();
    return loss_value;
  }

  std::unique_lock<std::mutex>* compute = nullptr;  // held on entry and on return

 private:
  engine::Model& model_;
  const Cut& cut_;
  transport::Connection& conn_;
  Traffic& traffic_;
  transport::Deadline timeout_;
  const workloads::Workload& wl_;
  engine::Device device_;
};

void run_turn(Pool& pool, ClientState& cs, transport::Connection& conn, int64_t client, const Turn& turn) {
  const workloads::Workload& wl = *pool.ctx.workload;
  const std::vector<int64_t>& mine = pool.partition.clients[static_cast<size_t>(client)];
  const auto timeout = step_timeout(pool.settings);
  if (turn.client != client || turn.batch < 1 || turn.steps < 0 ||
      turn.steps > workloads::batches_per_epoch(static_cast<int64_t>(mine.size()), turn.batch) ||
      static_cast<int64_t>(turn.lrs.size()) != turn.steps)
    throw std::runtime_error("split client " + std::to_string(client) + ": a turn for client " +
                             std::to_string(turn.client) + " of " + std::to_string(turn.steps) + " steps of " +
                             std::to_string(turn.batch) + " does not fit its " + std::to_string(mine.size()) +
                             " samples");
  Traffic traffic;
  const std::vector<int> client_stages = pool.cut.client_stages();
  std::shared_ptr<engine::Model> held = make_model(pool.ctx);
  engine::Model& model = *held;
  engine::NamedTensors half = stages_state(model, client_stages);
  traffic.count(conn, "weights", [&] { receive_state(conn, half, timeout); });
  std::unique_ptr<engine::Optimizer> optimizer =
      make_optimizer(pool.ctx.config.optimizer, stages_parameters(model, client_stages));
  if (cs.optimizer_state && !turn.fresh_optimizer) optimizer->load_state(*cs.optimizer_state);
  engine::Optimizer& opt = *optimizer;
  model.train();

  // The client's own shuffle: client 0 shuffles with the run's seed, as single does.
  const uint64_t seed = pool.ctx.config.seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(client);
  const std::vector<int64_t> order = workloads::shuffled(mine, seed, turn.epoch);
  TurnDone done;
  done.epoch = turn.epoch;
  done.client = client;
  done.samples = static_cast<int64_t>(mine.size());
  engine::reset_memory_peaks();
  CutStep micro(model, pool.cut, conn, traffic, timeout, wl, pool.ctx.device);
  const std::vector<engine::Tensor> params = stages_parameters(model, client_stages);
  Reducer alone;
  for (int64_t i = 0; i < turn.steps; ++i) {
    std::unique_lock compute(pool.compute_mutex);
    micro.compute = &compute;
    StepOptions step{.micro_batches = 1, .lr = static_cast<float>(turn.lrs[static_cast<size_t>(i)]),
                     .clip_grad_norm = 0.0, .before_step = nullptr};
    const StepTimes t = train_step(wl, workloads::batch_at(order, turn.batch, i), turn.epoch, params, opt, alone,
                                   micro, step);
    done.data += t.data;
    done.forward += t.forward;
    done.backward += t.backward;
    done.optimizer += t.optimizer;
    done.loss_sum += t.loss;
    done.steps += 1;
  }
  if (done.steps > 0) cs.optimizer_state = opt.state();
  const engine::MemStats mem = engine::memory_stats();
  done.memory_peak = mem.total_peak;
  const nlohmann::json memory = memory_json(mem);
  done.rss_peak = peak_rss_bytes();
  traffic.count(conn, "weights", [&] { send_state(conn, stages_state(model, client_stages), timeout); });
  traffic.count(conn, "control", [&] { transport::send_message(conn, MessageType::control, done, timeout); });

  const Traffic::Count total = traffic.total();
  nlohmann::json rec = {{"type", "client_turn"},
                        {"arm", pool.ctx.arm},
                        {"role", pool.ctx.role},
                        {"client", client},
                        {"epoch", turn.epoch},
                        {"steps", done.steps},
                        {"samples", done.samples},
                        {"compute", {{"forward", done.forward}, {"backward", done.backward}, {"optimizer", done.optimizer}}},
                        {"data", done.data},
                        {"bytes_sent", total.sent},
                        {"bytes_received", total.received},
                        {"traffic", traffic.to_json()},
                        {"memory", memory},
                        {"rss_peak", done.rss_peak}};
  std::lock_guard lock(pool.records_mutex);
  pool.records->write(rec);
  if (pool.ctx.on_record) pool.ctx.on_record(rec.dump());
}

}  // namespace

void run_pool(const RoleContext& ctx, const Settings& settings, int64_t index) {
  if (!ctx.coordinator) throw std::invalid_argument("split pool: needs the run's coordinator to find the server");
  Pool pool{ctx, settings, {}, {}, {}, {}, {}};
  pool.partition = client_partition(settings.partition, settings.clients, ctx.config.seed, *ctx.workload);
  pool.cut = resolve_cut(workloads::model_info(ctx.model_name).stages, settings);
  pool.records = std::make_unique<JsonlWriter>(records_path(ctx.arm_dir, ctx.role).string(), int64_t{0});

  std::vector<std::thread> threads;
  for (int64_t c = index; c < settings.clients; c += settings.pools())
    threads.emplace_back([&pool, c] {
      ClientState cs;
      run_virtual_client(pool.ctx, "split", {server_address_key(pool.ctx.arm), server_token_key(pool.ctx.arm)},
                         kClientRolePrefix + std::to_string(c), pool.ctx.link, pool.settings.join_timeout_s,
                         "client " + std::to_string(c),
                         [&](transport::Connection& conn, const transport::Frame& frame) {
                           const Turn turn = transport::decode_message<Turn>(frame.payload);
                           run_turn(pool, cs, conn, c, turn);
                         });
    });
  for (std::thread& t : threads) t.join();
}

}  // namespace quartet::trainers::split

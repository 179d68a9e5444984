// A pool process: hosts virtual clients, each with its own connection to the server and
// its own partition. A client holds only its indices (and, with top-k, its residual)
// between rounds; the model and the optimizer exist only while it trains, and one client
// trains at a time, so a pool's tracked memory is one model's whatever the number of
// clients it hosts. Received weights wait as plain buffers until their client's turn.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "engine/safetensors.h"
#include "trainers/federated/client.h"
#include "trainers/federated/compress.h"
#include "trainers/federated/protocol.h"
#include "trainers/federated/roles.h"
#include "trainers/training_loop.h"
#include "trainers/metrics.h"
#include "trainers/virtual_clients.h"
#include "transport/coordinator.h"
#include "transport/messages.h"

namespace quartet::trainers::federated {
namespace {

using namespace std::chrono_literals;
using transport::MessageType;

constexpr auto kSendTimeout = std::chrono::minutes(10);

// One client trains at a time (the pool's compute threads are shared), and of those
// waiting the one with the smallest id goes next: updates then reach the server nearly
// in client order, which is the order its average adds them in, so it holds few of them
// (trainers/federated/strategy.h, OrderedAverage). A plain mutex let them through at random: with
// 200 clients at C = 1.0 the server held up to 192 updates.
class TrainGate {
 public:
  void enter(int64_t client) {
    std::unique_lock lock(mutex_);
    waiting_.insert(client);
    cv_.wait(lock, [&] { return !busy_ && *waiting_.begin() == client; });
    waiting_.erase(waiting_.begin());
    busy_ = true;
  }
  void leave() {
    {
      std::lock_guard lock(mutex_);
      busy_ = false;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::set<int64_t> waiting_;
  bool busy_ = false;
};

struct Pool {
  const RoleContext& ctx;
  const Settings& settings;
  workloads::Partition partition;
  TrainGate train_gate;
  std::mutex records_mutex;
  std::unique_ptr<JsonlWriter> records;
};

// One round of one client: weights in, training, update out.
void serve_round(Pool& pool, transport::Connection& conn, int64_t client, const RoundStart& start,
                 std::vector<float>& residual) {
  const workloads::Workload& wl = *pool.ctx.workload;
  transport::Frame frame = conn.receive(kSendTimeout);
  transport::expect_type(frame, MessageType::tensors, conn.peer());
  Params global;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  {
    transport::TensorsMessage m = transport::decode_tensors(frame.payload);
    frame.payload = {};
    names = std::move(m.names);
    shapes = std::move(m.shapes);
    global = std::move(m.data);
  }
  LocalConfig lc;
  lc.local_epochs = pool.settings.local_epochs;
  lc.batch = pool.ctx.config.batch;
  lc.optimizer = pool.ctx.config.optimizer;
  lc.optimizer.lr = static_cast<float>(start.lr);
  lc.mu = start.mu;
  lc.clip_grad_norm = pool.ctx.config.clip_grad_norm;
  lc.seed = pool.ctx.config.seed;

  Stopwatch queued;
  LocalResult result;
  engine::MemStats memory;
  double queue = 0.0;
  {
    pool.train_gate.enter(client);
    struct Leave {
      TrainGate& gate;
      ~Leave() { gate.leave(); }
    } leave{pool.train_gate};
    queue = queued.seconds();
    // Only the training client allocates tensors, so the peaks from here are its own.
    engine::reset_memory_peaks();
    // A model only while training: built, trained, freed.
    std::shared_ptr<engine::Model> model = make_model(pool.ctx);
    model->set_checkpointing(pool.ctx.config.checkpoint);
    result = train_client(*model, wl, pool.partition.clients[static_cast<size_t>(client)], global, lc, client,
                          start.round);
    memory = engine::memory_stats();
  }
  if (client < pool.settings.byzantine_clients)
    corrupt_update(result.weights, global, pool.settings.byzantine_attack, pool.settings.byzantine_scale);

  UpdateDone done;
  done.round = start.round;
  done.client = client;
  done.samples = static_cast<int64_t>(pool.partition.clients[static_cast<size_t>(client)].size());
  done.samples_processed = result.samples_processed;
  done.steps = result.steps;
  done.loss = result.loss;
  done.forward = result.forward;
  done.backward = result.backward;
  done.optimizer = result.optimizer;
  done.data = result.data;
  done.queue = queue;

  Stopwatch upload;
  if (start.codec == "none") {
    std::vector<transport::TensorRef> refs;
    for (size_t i = 0; i < result.weights.size(); ++i) refs.push_back({names[i], shapes[i], result.weights[i]});
    transport::send_tensors(conn, refs, kSendTimeout);
  } else {
    std::vector<float> delta;
    for (size_t i = 0; i < result.weights.size(); ++i)
      for (size_t k = 0; k < result.weights[i].size(); ++k) delta.push_back(result.weights[i][k] - global[i][k]);
    UpdatePayload payload;
    payload.bytes = start.codec == "fp16" ? encode_fp16(delta) : encode_topk(delta, start.topk_fraction, residual);
    transport::send_message(conn, MessageType::control, payload, kSendTimeout);
  }
  done.upload = upload.seconds();
  transport::send_message(conn, MessageType::control, done, kSendTimeout);

  const transport::Counters c = conn.counters();
  nlohmann::json rec = {{"type", "client_round"},
                        {"arm", pool.ctx.arm},
                        {"role", pool.ctx.role},
                        {"client", client},
                        {"round", start.round},
                        {"samples", done.samples},
                        {"samples_processed", done.samples_processed},
                        {"steps", done.steps},
                        {"loss", done.loss},
                        {"compute", {{"forward", done.forward}, {"backward", done.backward},
                                     {"optimizer", done.optimizer}}},
                        {"data", done.data},
                        {"queue", done.queue},
                        {"upload", done.upload},
                        {"bytes_sent", c.bytes_sent},
                        {"bytes_received", c.bytes_received},
                        {"memory", memory_json(memory)},
                        {"rss_peak", peak_rss_bytes()}};
  std::lock_guard lock(pool.records_mutex);
  pool.records->write(rec);
  if (pool.ctx.on_record) pool.ctx.on_record(rec.dump());
}

}  // namespace

void run_pool(const RoleContext& ctx, const Settings& settings, int64_t index) {
  if (!ctx.coordinator) throw std::invalid_argument("federated pool: needs the run's coordinator to find the server");
  Pool pool{ctx, settings, {}, {}, {}, {}};
  pool.partition = client_partition(settings.partition, settings.clients, ctx.config.seed, *ctx.workload);
  pool.records = std::make_unique<JsonlWriter>(records_path(ctx.arm_dir, ctx.role).string());

  std::vector<std::thread> threads;
  for (int64_t c = index; c < settings.clients; c += settings.pools())
    threads.emplace_back([&pool, c] {
      std::vector<float> residual;  // top-k error feedback: what earlier rounds did not send
      run_virtual_client(pool.ctx, "federated", {server_address_key(pool.ctx.arm), server_token_key(pool.ctx.arm)},
                         kClientRolePrefix + std::to_string(c), pool.ctx.link, pool.settings.join_timeout_s, c,
                         [&](transport::Connection& conn, const transport::Frame& frame) {
                           serve_round(pool, conn, c, transport::decode_message<RoundStart>(frame.payload), residual);
                         });
    });
  for (std::thread& t : threads) t.join();
}

}  // namespace quartet::trainers::federated

// A pool process: trains the virtual clients the server hands it, one at a time, over
// one connection. A client's partition is computed here from the seed, so any pool can
// train any client: the server gives a pool the next waiting client as soon as it is
// free, and no pool idles while another has clients queued. The model and the optimizer
// exist only while a client trains, so a pool's tracked memory is one model's whatever
// the number of clients. With topk a client's residual stays in the pool that holds it
// (the server keeps such clients on pool c mod P).

#include <chrono>
#include <map>

#include "engine/cpu/kernel_cache.h"
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

struct Pool {
  const RoleContext& ctx;
  const Settings& settings;
  workloads::Partition partition;
  std::map<int64_t, std::vector<float>> residuals;  // topk error feedback: what a client's earlier rounds did not send
  std::unique_ptr<JsonlWriter> records;
};

// One round of one client: weights in, training, update out.
void serve_round(Pool& pool, transport::Connection& conn, const RoundStart& start) {
  const workloads::Workload& wl = *pool.ctx.workload;
  const int64_t client = start.client;
  if (client < 0 || client >= pool.settings.clients)
    throw std::runtime_error("asked to train client " + std::to_string(client) + " of " +
                             std::to_string(pool.settings.clients));
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

  LocalResult result;
  engine::MemStats memory;
  {
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
    payload.bytes = start.codec == "fp16" ? encode_fp16(delta) : encode_topk(delta, start.topk_fraction, pool.residuals[client]);
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
                        {"upload", done.upload},
                        {"kernel_tuning", engine::cpu::kernel_tuning_seconds()},
                        {"bytes_sent", c.bytes_sent},
                        {"bytes_received", c.bytes_received},
                        {"memory", memory_json(memory)},
                        {"rss_peak", peak_rss_bytes()}};
  pool.records->write(rec);
  if (pool.ctx.on_record) pool.ctx.on_record(rec.dump());
}

}  // namespace

void run_pool(const RoleContext& ctx, const Settings& settings, int64_t index) {
  if (!ctx.coordinator) throw std::invalid_argument("federated pool: needs the run's coordinator to find the server");
  Pool pool{ctx, settings, {}, {}, {}};
  pool.partition = client_partition(settings.partition, settings.clients, ctx.config.seed, *ctx.workload);
  pool.records = std::make_unique<JsonlWriter>(records_path(ctx.arm_dir, ctx.role).string());
  run_virtual_client(ctx, "federated", {server_address_key(ctx.arm), server_token_key(ctx.arm)},
                     kPoolRolePrefix + std::to_string(index), ctx.link, settings.join_timeout_s,
                     "pool " + std::to_string(index),
                     [&pool](transport::Connection& conn, const transport::Frame& frame) {
                       serve_round(pool, conn, transport::decode_message<RoundStart>(frame.payload));
                     });
}

}  // namespace quartet::trainers::federated

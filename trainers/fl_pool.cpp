// A pool process: hosts virtual clients, each with its own connection to the server and
// its own partition. A client holds only its indices (and, with top-k, its residual)
// between rounds; the model, the received weights and the optimizer exist only while it
// trains, and one client trains at a time, so a pool's memory is one model's whatever
// the number of clients it hosts.

#include <chrono>
#include <mutex>
#include <thread>

#include "engine/safetensors.h"
#include "trainers/fl_client.h"
#include "trainers/fl_compress.h"
#include "trainers/fl_protocol.h"
#include "trainers/fl_roles.h"
#include "trainers/metrics.h"
#include "transport/coordinator.h"
#include "transport/messages.h"

namespace quartet::trainers::fl {
namespace {

using namespace std::chrono_literals;
using transport::MessageType;

// Between rounds a client waits as long as the server needs (evaluation, checkpoints,
// stragglers); the server ends the wait with a shutdown frame or by closing.
constexpr auto kIdleWait = std::chrono::hours(24);
constexpr auto kSendTimeout = std::chrono::minutes(10);

struct Pool {
  const RoleContext& ctx;
  const FederatedSettings& settings;
  workloads::Partition partition;
  std::mutex train_mutex;  // one client trains at a time: the pool's compute threads are shared
  std::mutex records_mutex;
  std::unique_ptr<JsonlWriter> records;
};

std::unique_ptr<transport::Connection> connect_once(const std::string& address, const std::string& token,
                                                    const std::string& link, int64_t client) {
  const auto [host, port] = transport::parse_host_port(address);
  std::unique_ptr<transport::Connection> conn = transport::Connection::connect(host, port, 30s);
  conn->set_link(transport::link_profile(link));
  transport::send_message(*conn, MessageType::hello, transport::Hello{token, kClientRolePrefix + std::to_string(client)},
                          30s);
  transport::receive_message<transport::Welcome>(*conn, MessageType::welcome, 60s);
  return conn;
}

// Joins the server whose address and token the coordinator holds. The keys are read
// again after a failed attempt: a server that restarted (resume) publishes new ones.
std::unique_ptr<transport::Connection> connect_client(Pool& pool, int64_t client) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(pool.settings.join_timeout_s);
  for (;;) {
    const std::string address = pool.ctx.coordinator->kv_wait(server_address_key(pool.ctx.arm), std::chrono::minutes(10));
    const std::string token = pool.ctx.coordinator->kv_wait(server_token_key(pool.ctx.arm), std::chrono::minutes(1));
    try {
      return connect_once(address, token, pool.settings.link, client);
    } catch (const std::exception&) {
      if (std::chrono::steady_clock::now() > give_up) throw;
      std::this_thread::sleep_for(200ms);
    }
  }
}

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
  double queue = 0.0;
  {
    std::lock_guard lock(pool.train_mutex);
    queue = queued.seconds();
    // A model only while training: built, trained, freed.
    std::shared_ptr<engine::Model> model = wl.make_model(pool.ctx.model_name, pool.ctx.config.seed);
    result = train_client(*model, wl, pool.partition.clients[static_cast<size_t>(client)], global, lc, client,
                          start.round);
  }

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
                        {"rss_peak", peak_rss_bytes()}};
  std::lock_guard lock(pool.records_mutex);
  pool.records->write(rec);
  if (pool.ctx.on_record) pool.ctx.on_record(rec.dump());
}

void client_loop(Pool& pool, int64_t client) {
  std::unique_ptr<transport::Connection> conn;
  try {
    conn = connect_client(pool, client);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "federated %s: client %lld could not join the server: %s\n", pool.ctx.role.c_str(),
                 static_cast<long long>(client), e.what());
    return;
  }
  std::vector<float> residual;  // top-k error feedback: what earlier rounds did not send
  try {
    for (;;) {
      const transport::Frame frame = conn->receive(kIdleWait);
      if (frame.type == MessageType::shutdown) return;
      transport::expect_type(frame, MessageType::control, conn->peer());
      const RoundStart start = transport::decode_message<RoundStart>(frame.payload);
      try {
        serve_round(pool, *conn, client, start, residual);
      } catch (const transport::ConnectionClosed&) {
        throw;
      } catch (const std::exception& e) {
        // Training or encoding failed: tell the server, which leaves this client out.
        transport::send_error_and_close(*conn, "client " + std::to_string(client) + ": " + e.what(), 5s);
        throw;
      }
    }
  } catch (const transport::ConnectionClosed&) {
    // The server is done (or gone): nothing more to do for this client.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "federated %s: client %lld stopped: %s\n", pool.ctx.role.c_str(),
                 static_cast<long long>(client), e.what());
  }
}

}  // namespace

void run_pool(const RoleContext& ctx, const FederatedSettings& settings, int64_t index) {
  if (!ctx.coordinator) throw std::invalid_argument("federated pool: needs the run's coordinator to find the server");
  Pool pool{ctx, settings, {}, {}, {}, {}};
  workloads::PartitionSpec ps = settings.partition;
  ps.seed = ctx.config.seed;
  pool.partition = workloads::make_partition(ps, ctx.workload->train_set());
  pool.records = std::make_unique<JsonlWriter>(records_path(ctx.arm_dir, ctx.role).string());

  std::vector<std::thread> threads;
  for (int64_t c = index; c < settings.clients; c += settings.processes)
    threads.emplace_back([&pool, c] { client_loop(pool, c); });
  for (std::thread& t : threads) t.join();
}

}  // namespace quartet::trainers::fl

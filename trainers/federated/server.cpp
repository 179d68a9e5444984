// The federated server: listens for the virtual clients, runs the rounds (sample, send
// weights, wait until the deadline, aggregate with the strategy, evaluate, record,
// checkpoint). Each client connection is served by its own handler thread (a client
// proxy); the round loop hands it a job and collects its outcome.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <optional>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "engine/safetensors.h"
#include "trainers/checkpoint.h"
#include "trainers/federated/client.h"
#include "trainers/federated/compress.h"
#include "trainers/federated/protocol.h"
#include "trainers/federated/roles.h"
#include "trainers/training_loop.h"
#include "trainers/metrics.h"
#include "trainers/virtual_clients.h"
#include "transport/coordinator.h"
#include "transport/messages.h"
#include "transport/server.h"

namespace quartet::trainers::federated {
namespace {

using namespace std::chrono_literals;
using transport::MessageType;
using Clock = std::chrono::steady_clock;

// A straggler's update may still arrive after its round closed; the handler waits this
// long for it (then discards it) before giving the connection up.
constexpr auto kLateReplyWait = std::chrono::hours(1);
constexpr auto kSendTimeout = std::chrono::minutes(10);

struct RoundJob {
  RoundStart start;
  std::shared_ptr<const Params> global;  // owned by the job: the round loop moves on without waiting
  const std::vector<std::string>* names = nullptr;
  const std::vector<std::vector<int64_t>>* shapes = nullptr;
};

struct Outcome {
  int64_t client = 0;
  int64_t round = 0;
  bool ok = false;
  std::string error;
  UpdateDone done;
  Params weights;
  int64_t down = 0, up = 0, messages = 0;  // bytes and frames of this job on the client's connection
  double download = 0.0;                   // sending RoundStart and weights, seconds
  double finished_at = 0.0;                // seconds after dispatch
};

struct Slot {
  transport::Connection* conn = nullptr;  // while a handler serves this client
  std::optional<RoundJob> job;
  bool busy = false;
};

struct FlServer {
  FlServer(const RoleContext& ctx, const Settings& s) : ctx_(ctx), s_(s), slots_(s.clients) {}

  // The client proxy: one thread per connected client.
  void handle(transport::Connection& conn, const transport::Hello& hello) {
    const int64_t client = parse_client_role(hello.role, kClientRolePrefix);
    conn.set_link(transport::link_profile(ctx_.link));
    {
      std::lock_guard lock(mutex_);
      if (client < 0 || client >= s_.clients || slots_[client].conn) {
        log("refused " + conn.peer() + ": " + (client < 0 || client >= s_.clients ? "no client " : "a second connection for client ") +
            hello.role);
        transport::send_error_and_close(conn, "federated server: no such client or already connected: " + hello.role,
                                        5s);
        return;
      }
      slots_[client].conn = &conn;
    }
    transport::send_message(conn, MessageType::welcome,
                            transport::Welcome{static_cast<int32_t>(client), static_cast<int32_t>(s_.clients), "{}"},
                            30s);
    cv_.notify_all();
    try {
      serve(conn, client);
    } catch (...) {
      release(client, conn);
      throw;
    }
    release(client, conn);
  }

  void log(const std::string& line) {
    std::fprintf(stderr, "federated server: %s\n", line.c_str());
    std::fflush(stderr);
  }

  // Frees the slot unless the client has since reconnected on another connection.
  void release(int64_t client, const transport::Connection& conn) {
    std::lock_guard lock(mutex_);
    if (slots_[client].conn != &conn) return;
    slots_[client].conn = nullptr;
    slots_[client].busy = false;
    slots_[client].job.reset();
    cv_.notify_all();
  }

  void serve(transport::Connection& conn, int64_t client) {
    for (;;) {
      RoundJob job;
      Clock::time_point dispatched;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || slots_[client].job.has_value(); });
        if (stopping_) {
          lock.unlock();
          try {
            conn.send(MessageType::shutdown, std::span<const std::byte>{}, 5s);
          } catch (const std::exception&) {
          }
          return;
        }
        job = std::move(*slots_[client].job);
        slots_[client].job.reset();
        dispatched = dispatched_at_;
      }
      Outcome out;
      out.client = client;
      out.round = job.start.round;
      const transport::Counters before = conn.counters();
      try {
        Stopwatch t;
        transport::send_message(conn, MessageType::control, job.start, kSendTimeout);
        std::vector<transport::TensorRef> refs;
        for (size_t i = 0; i < job.global->size(); ++i)
          refs.push_back({(*job.names)[i], (*job.shapes)[i], (*job.global)[i]});
        transport::send_tensors(conn, refs, kSendTimeout);
        out.download = t.seconds();
        const auto reply_deadline = std::chrono::duration_cast<transport::Deadline>(
            std::chrono::duration<double>(s_.deadline_s)) + kLateReplyWait;
        transport::Frame payload = conn.receive(reply_deadline);
        if (job.start.codec == "none") {
          transport::expect_type(payload, MessageType::tensors, conn.peer());
          out.weights = transport::decode_tensors(payload.payload).data;
        } else {
          transport::expect_type(payload, MessageType::control, conn.peer());
          const UpdatePayload p = transport::decode_message<UpdatePayload>(payload.payload);
          size_t n = 0;
          for (const auto& t2 : *job.global) n += t2.size();
          const std::vector<float> delta =
              job.start.codec == "fp16" ? decode_fp16(p.bytes, n) : decode_topk(p.bytes, n);
          out.weights = *job.global;
          size_t at = 0;
          for (auto& w : out.weights)
            for (float& v : w) v += delta[at++];
        }
        payload.payload = {};
        out.done = transport::receive_message<UpdateDone>(conn, MessageType::control, reply_deadline);
        if (out.done.client != client || out.done.round != job.start.round)
          throw std::runtime_error("update for client " + std::to_string(out.done.client) + " round " +
                                   std::to_string(out.done.round) + " on client " + std::to_string(client) +
                                   "'s connection in round " + std::to_string(job.start.round));
        if (!shaped_like(out.weights, *job.global)) throw std::runtime_error("update shaped unlike the model");
        out.ok = true;
      } catch (const std::exception& e) {
        out.ok = false;
        out.error = e.what();
      }
      const transport::Counters after = conn.counters();
      out.down = after.bytes_sent - before.bytes_sent;
      out.up = after.bytes_received - before.bytes_received;
      out.messages = (after.messages_sent - before.messages_sent) + (after.messages_received - before.messages_received);
      out.finished_at = std::chrono::duration<double>(Clock::now() - dispatched).count();
      const bool failed = !out.ok;
      {
        std::lock_guard lock(mutex_);
        slots_[client].busy = false;
        // A failed client is gone at once, so the next round does not hand it a job.
        if (failed) slots_[client].conn = nullptr;
        outcomes_.push_back(std::move(out));
      }
      cv_.notify_all();
      if (failed) return;  // the connection is broken or the client gave up; it may reconnect
    }
  }

  static bool shaped_like(const Params& a, const Params& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].size() != b[i].size()) return false;
    return true;
  }

  const RoleContext& ctx_;
  const Settings& s_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::deque<Outcome> outcomes_;
  Clock::time_point dispatched_at_;
  bool stopping_ = false;

  void stop_clients() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
  }
};

void log_drop(int64_t round, const nlohmann::json& d) {
  std::fprintf(stderr, "federated server: round %lld leaves out client %lld: %s\n", static_cast<long long>(round),
               static_cast<long long>(d.at("client").get<int64_t>()), d.at("reason").get<std::string>().c_str());
  std::fflush(stderr);
}

// Checkpoint: global weights, strategy state and the position, one safetensors file.
void save_server_checkpoint(const std::filesystem::path& path, const engine::NamedTensors& names_like,
                            const Params& global, const Params& strategy_state, const Position& pos) {
  engine::NamedTensors tensors;
  for (size_t i = 0; i < global.size(); ++i)
    tensors.emplace_back("model/" + names_like[i].first,
                         engine::Tensor::from_vector(names_like[i].second.shape(), global[i]));
  for (size_t i = 0; i < strategy_state.size(); ++i)
    tensors.emplace_back("strategy/" + names_like[i].first,
                         engine::Tensor::from_vector(names_like[i].second.shape(), strategy_state[i]));
  const nlohmann::json p = {{"epochs_done", pos.epochs_done}, {"step", pos.step},
                            {"samples", pos.samples},         {"wall", pos.wall},
                            {"records_bytes", pos.records_bytes}, {"extra", pos.extra}};
  engine::save_safetensors(path.string(), tensors, {{"quartet.position", p.dump()}, {"format", "pt"}});
}

bool load_server_checkpoint(const std::filesystem::path& path, const engine::NamedTensors& names_like, Params& global,
                            Params& strategy_state, Position& pos) {
  if (!std::filesystem::exists(path)) return false;
  engine::SafetensorsFile f = engine::read_safetensors(path.string());
  std::map<std::string, engine::Tensor> by_name(f.tensors.begin(), f.tensors.end());
  auto take = [&](const std::string& prefix, Params& out, bool required) {
    out.clear();
    for (const auto& [name, like] : names_like) {
      auto it = by_name.find(prefix + name);
      if (it == by_name.end()) {
        if (required) throw std::runtime_error(path.string() + ": checkpoint lacks " + prefix + name);
        out.clear();
        return;
      }
      if (it->second.numel() != like.numel())
        throw std::runtime_error(path.string() + ": " + prefix + name + " does not fit this arm's model");
      out.push_back(it->second.to_vector());
    }
  };
  take("model/", global, true);
  take("strategy/", strategy_state, false);
  auto it = f.metadata.find("quartet.position");
  if (it == f.metadata.end()) throw std::runtime_error(path.string() + ": not a Quartet checkpoint (no position)");
  const nlohmann::json j = nlohmann::json::parse(it->second);
  pos.epochs_done = j.at("epochs_done").get<int64_t>();
  pos.step = j.at("step").get<int64_t>();
  pos.samples = j.at("samples").get<int64_t>();
  pos.wall = j.at("wall").get<double>();
  pos.records_bytes = j.at("records_bytes").get<int64_t>();
  pos.extra = j.value("extra", nlohmann::json::object());
  return true;
}

}  // namespace

void run_server(const RoleContext& ctx, const Settings& s) {
  if (!ctx.coordinator) throw std::invalid_argument("federated server: needs the run's coordinator for rendezvous");
  const workloads::Workload& wl = *ctx.workload;
  const TrainConfig& cfg = ctx.config;
  const workloads::Partition partition = client_partition(s.partition, s.clients, cfg.seed, wl);
  std::unique_ptr<Strategy> strategy = make_strategy(s.strategy_config());

  std::shared_ptr<engine::Model> model = load_initial_model(ctx);
  const engine::NamedTensors state = model->state_dict();
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& [n, t] : state) {
    names.push_back(n);
    shapes.push_back(t.shape());
  }
  Params global = params_of(*model);
  const int64_t model_bytes = params_bytes(global);

  Position pos;
  nlohmann::json totals = {{"bytes_sent", 0}, {"bytes_received", 0}, {"messages", 0}};
  if (ctx.resume) {
    Params strategy_state;
    if (load_server_checkpoint(checkpoint_path(ctx.arm_dir), state, global, strategy_state, pos)) {
      strategy->load_state(std::move(strategy_state));
      if (pos.extra.contains("totals")) totals = pos.extra["totals"];
    }
  }
  JsonlWriter records(records_path(ctx.arm_dir, ctx.role).string(),
                      ctx.resume ? std::optional<int64_t>(pos.records_bytes) : std::nullopt);
  const double wall0 = pos.wall;
  Stopwatch clock;

  auto write = [&](const nlohmann::json& r) {
    records.write(r);
    if (ctx.on_record) ctx.on_record(r.dump());
  };
  if (pos.step == 0) {
    nlohmann::json hist = nlohmann::json::array();
    for (int64_t c = 0; c < partition.num_clients(); ++c)
      hist.push_back({{"client", c}, {"samples", partition.clients[c].size()}, {"labels", partition.histograms[c]}});
    write({{"type", "partition"}, {"arm", ctx.arm}, {"role", ctx.role}, {"rank", ctx.rank},
           {"kind", s.partition.kind}, {"clients", s.clients}, {"mean_max_class_share",
                                                                  workloads::mean_max_class_share(partition)},
           {"histograms", hist}});
  }

  FlServer fl(ctx, s);
  transport::ServerOptions so;
  so.address = ctx.coordinator->options().host;
  so.port = 0;
  so.token = transport::make_token();
  so.tls = ctx.coordinator->options().tls;
  so.max_connections = static_cast<size_t>(s.clients) + 16;
  so.log = [](const std::string& line) { std::fprintf(stderr, "federated server: %s\n", line.c_str()); };
  transport::Server server(so, [&fl](transport::Connection& c, const transport::Hello& h) { fl.handle(c, h); });
  // However the rounds end (a checkpoint on a full disk throws), the handlers parked on
  // the clients' connections are released before the server joins them.
  const ReleaseOnExit release([&fl] { fl.stop_clients(); });
  ctx.coordinator->kv_set(server_token_key(ctx.arm), so.token);
  ctx.coordinator->kv_set(server_address_key(ctx.arm), so.address + ":" + std::to_string(server.port()));

  // Every client joins before the first round (up to join_timeout_s; late ones may join later).
  {
    std::unique_lock lock(fl.mutex_);
    fl.cv_.wait_for(lock, std::chrono::duration<double>(s.join_timeout_s), [&] {
      return std::all_of(fl.slots_.begin(), fl.slots_.end(), [](const Slot& sl) { return sl.conn != nullptr; });
    });
  }

  const int64_t per_round = clients_per_round(s.clients, s.fraction, s.min_clients);
  const auto schedule = make_schedule(cfg.optimizer, cfg.schedule, cfg.batch, s.rounds);
  const int64_t train_size = wl.train_size();
  for (int64_t round = pos.step + 1; round <= s.rounds; ++round) {
    // The round's memory figures count from here: set-up and the last round's checkpoint
    // copies are not part of this round's work.
    engine::reset_memory_peaks();
    Stopwatch round_clock;
    const std::vector<int64_t> sampled = sample_clients(s.clients, per_round, cfg.seed, round);
    RoundJob job;
    job.start = RoundStart{round, schedule->lr_at(round - 1), strategy->proximal_mu(), s.compress, s.topk_fraction};
    job.global = std::make_shared<const Params>(global);
    job.names = &names;
    job.shapes = &shapes;
    nlohmann::json dropped = nlohmann::json::array();
    std::vector<int64_t> asked;
    {
      std::lock_guard lock(fl.mutex_);
      fl.outcomes_.erase(std::remove_if(fl.outcomes_.begin(), fl.outcomes_.end(),
                                        [&](const Outcome& o) { return o.round < round; }),
                         fl.outcomes_.end());
      fl.dispatched_at_ = Clock::now();
      for (int64_t c : sampled) {
        Slot& sl = fl.slots_[c];
        if (!sl.conn) {
          dropped.push_back({{"client", c}, {"reason", "not connected"}});
        } else if (sl.busy) {
          dropped.push_back({{"client", c}, {"reason", "still busy with an earlier round"}});
        } else {
          sl.busy = true;
          sl.job = job;
          asked.push_back(c);
        }
      }
    }
    fl.cv_.notify_all();

    // Collect until every asked client answered or failed, or the deadline. Each update
    // goes into the average as it arrives (OrderedAverage holds only those ahead of a
    // slower client); `got` keeps the rest of each outcome, without its weights.
    std::vector<Outcome> got;
    std::vector<size_t> sizes;
    for (const std::vector<float>& t : global) sizes.push_back(t.size());
    OrderedAverage average(asked, std::move(sizes));
    const auto deadline = fl.dispatched_at_ + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(s.deadline_s));
    while (got.size() < asked.size()) {
      std::vector<Outcome> fresh;
      {
        std::unique_lock lock(fl.mutex_);
        auto arrived = [&] {
          return std::any_of(fl.outcomes_.begin(), fl.outcomes_.end(), [&](const Outcome& o) { return o.round == round; });
        };
        fl.cv_.wait_until(lock, deadline, arrived);
        for (auto it = fl.outcomes_.begin(); it != fl.outcomes_.end();) {
          if (it->round == round) {
            fresh.push_back(std::move(*it));
            it = fl.outcomes_.erase(it);
          } else {
            ++it;
          }
        }
      }
      for (Outcome& o : fresh) {
        if (o.ok) {
          try {
            average.add({o.client, o.done.samples, std::move(o.weights)});
          } catch (const std::invalid_argument& e) {  // e.g. a client claiming 0 samples: left out
            o.ok = false;
            o.error = e.what();
          }
        }
        if (!o.ok) average.skip(o.client);
        o.weights = Params();
        got.push_back(std::move(o));
      }
      if (fresh.empty() && Clock::now() >= deadline) break;
    }
    const double collect = round_clock.seconds();
    nlohmann::json per_client = nlohmann::json::array();
    std::vector<int64_t> hist(static_cast<size_t>(partition.num_classes), 0);
    int64_t round_samples = 0, round_down = 0, round_up = 0, round_messages = 0, weight_total = 0;
    double loss_weighted = 0.0, t_download = 0.0, t_compute = 0.0, t_upload = 0.0, fastest = 1e300;
    StepRecord r;
    std::sort(got.begin(), got.end(), [](const Outcome& a, const Outcome& b) { return a.client < b.client; });
    for (const int64_t c : asked)
      if (std::none_of(got.begin(), got.end(), [&](const Outcome& o) { return o.client == c; }))
        dropped.push_back({{"client", c}, {"reason", "missed the deadline of " + std::to_string(s.deadline_s) + " s"}});
    for (Outcome& o : got) {
      round_down += o.down;
      round_up += o.up;
      round_messages += o.messages;
      if (!o.ok) {
        dropped.push_back({{"client", o.client}, {"reason", o.error}});
        continue;
      }
      const UpdateDone& d = o.done;
      const double compute = d.forward + d.backward + d.optimizer + d.data;
      per_client.push_back({{"client", o.client}, {"samples", d.samples}, {"samples_processed", d.samples_processed},
                            {"loss", d.loss}, {"bytes_down", o.down}, {"bytes_up", o.up},
                            {"download", o.download}, {"compute", compute}, {"queue", d.queue},
                            {"upload", d.upload}, {"finished_at", o.finished_at}});
      t_download = std::max(t_download, o.download);
      t_compute = std::max(t_compute, compute);
      t_upload = std::max(t_upload, d.upload);
      fastest = std::min(fastest, o.finished_at);
      r.forward += d.forward;
      r.backward += d.backward;
      r.optimizer += d.optimizer;
      r.data += d.data;
      round_samples += d.samples_processed;
      loss_weighted += d.loss * static_cast<double>(d.samples);
      const auto& h = partition.histograms[static_cast<size_t>(o.client)];
      for (size_t k = 0; k < hist.size(); ++k) hist[k] += h[k];
      weight_total += d.samples;
    }
    for (const auto& dj : dropped) log_drop(round, dj);

    Stopwatch agg;
    const bool aggregated = average.added() >= s.min_clients;
    if (aggregated) global = strategy->aggregate(global, average.finish());
#ifdef __GLIBC__
    // The updates were decoded on the handler threads, into glibc's per-thread arenas,
    // which keep freed memory cached: without this the server's resident set climbs by
    // about a model per arena over the first rounds, and with the number of clients.
    malloc_trim(0);
#endif
    const double aggregation = agg.seconds();

    // Memory is taken before the evaluation and its peaks reset for it (as finish_step in
    // training_loop.cpp does), so the record shows the round's own memory like every regime's,
    // and the evaluation's batch is reported apart.
    const engine::MemStats round_mem = engine::memory_stats();
    engine::reset_memory_peaks();
    Stopwatch te;
    load_params(*model, global);
    const double quality = wl.evaluate(*model, cfg.eval_batch);
    const double eval_s = te.seconds();
    const int64_t eval_memory_peak = engine::memory_stats().total_peak;

    pos.step = round;
    pos.samples += round_samples;
    totals["bytes_sent"] = totals["bytes_sent"].get<int64_t>() + round_down;
    totals["bytes_received"] = totals["bytes_received"].get<int64_t>() + round_up;
    totals["messages"] = totals["messages"].get<int64_t>() + round_messages;
    r.step = round;
    r.samples = pos.samples;
    r.epoch = static_cast<double>(pos.samples) / static_cast<double>(train_size);
    r.loss = weight_total > 0 ? loss_weighted / static_cast<double>(weight_total) : 0.0;
    r.lr = job.start.lr;
    r.comm_exposed = t_download + t_upload;
    r.bytes_sent = totals["bytes_sent"].get<int64_t>();
    r.bytes_received = totals["bytes_received"].get<int64_t>();
    r.messages = totals["messages"].get<int64_t>();
    r.eval = Evaluation{wl.metric_name(), quality, wl.test_size(), eval_s};
    r.wall = wall0 + clock.seconds();
    nlohmann::json rec = to_json(r, ctx.arm, ctx.role, ctx.rank, round_mem);
    rec["eval"]["memory_peak"] = eval_memory_peak;
    rec["round"] = {
        {"index", round},
        {"rounds", s.rounds},
        {"strategy", strategy->name()},
        {"compress", s.compress},
        {"sampled", sampled},
        {"completed", per_client.size()},
        {"aggregated", aggregated},
        {"updates_held_peak", average.peak_held()},
        {"dropped", dropped},
        {"clients", per_client},
        {"model_bytes", model_bytes},
        {"bytes", {{"down", round_down}, {"up", round_up}, {"total", round_down + round_up}, {"messages", round_messages}}},
        {"time", {{"download", t_download}, {"compute", t_compute}, {"upload", t_upload},
                  {"collect", collect}, {"stragglers", got.empty() || fastest > 1e299 ? collect : collect - fastest},
                  {"aggregation", aggregation}, {"eval", eval_s}}},
        {"label_histogram", hist},
    };
    // A round short of its clients, or that kept the old weights, is a degraded step.
    if (!dropped.empty() || !aggregated)
      rec["degraded"] = "round " + std::to_string(round) + ": " + std::to_string(per_client.size()) + " of " +
                        std::to_string(sampled.size()) + " sampled clients' updates" +
                        (aggregated ? "" : ", too few to average (the weights were kept)") +
                        (dropped.empty() ? "" : "; first left out: client " + dropped[0]["client"].dump() + ", " +
                                                    dropped[0]["reason"].get<std::string>());
    write(rec);
    pos.wall = wall0 + clock.seconds();
    pos.records_bytes = records.bytes();
    pos.extra = {{"totals", totals}};
    save_server_checkpoint(checkpoint_path(ctx.arm_dir), state, global, strategy->state(), pos);
  }
  load_params(*model, global);
  engine::save_safetensors(final_weights_path(ctx.arm_dir).string(), model->state_dict());
  fl.stop_clients();
  server.stop();
}

}  // namespace quartet::trainers::federated

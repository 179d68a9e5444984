// The federated server: listens for the pools, runs the rounds (sample, hand each pool
// the next waiting client whenever it is free, wait until the deadline, aggregate with
// the strategy, evaluate, record, checkpoint). Each pool connection is served by its own
// handler thread; the round loop queues the round's clients and collects the outcomes.

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
  RoundStart start;                      // start.client: the client this job trains
  std::shared_ptr<const Params> global;  // owned by the job: the round loop moves on without waiting
  const std::vector<std::string>* names = nullptr;
  const std::vector<std::vector<int64_t>>* shapes = nullptr;
  Clock::time_point began;               // the round's start
  double started_at = 0.0;               // seconds after began: handed to a pool
};

struct Outcome {
  int64_t client = 0;
  int64_t pool = -1;  // -1: no pool took it
  int64_t round = 0;
  bool ok = false;
  std::string error;
  UpdateDone done;
  Params weights;
  int64_t down = 0, up = 0, messages = 0;  // bytes and frames of this job on the pool's connection
  double download = 0.0;                   // sending RoundStart and weights, seconds
  double started_at = 0.0;                 // seconds after the round began
  double finished_at = 0.0;
};

struct Slot {
  transport::Connection* conn = nullptr;  // while a handler serves this pool
  std::optional<RoundJob> job;
  bool busy = false;
};

// Seconds from `from` to now.
double since(Clock::time_point from) { return std::chrono::duration<double>(Clock::now() - from).count(); }

struct FlServer {
  FlServer(const RoleContext& ctx, const Settings& s) : ctx_(ctx), s_(s), slots_(s.pools()) {}

  // One thread per connected pool.
  void handle(transport::Connection& conn, const transport::Hello& hello) {
    const int64_t pool = parse_client_role(hello.role, kPoolRolePrefix);
    conn.set_link(transport::link_profile(ctx_.link));
    {
      std::lock_guard lock(mutex_);
      if (pool < 0 || pool >= s_.pools() || slots_[pool].conn) {
        log("refused " + conn.peer() + ": " + (pool < 0 || pool >= s_.pools() ? "no pool " : "a second connection for pool ") +
            hello.role);
        transport::send_error_and_close(conn, "federated server: no such pool or already connected: " + hello.role,
                                        5s);
        return;
      }
      slots_[pool].conn = &conn;
    }
    transport::send_message(conn, MessageType::welcome,
                            transport::Welcome{static_cast<int32_t>(pool), static_cast<int32_t>(s_.clients), "{}"},
                            30s);
    {
      std::lock_guard lock(mutex_);
      dispatch_locked();  // a pool joining mid-round takes waiting clients at once
    }
    cv_.notify_all();
    try {
      serve(conn, pool);
    } catch (...) {
      release(pool, conn);
      throw;
    }
    release(pool, conn);
  }

  void log(const std::string& line) {
    std::fprintf(stderr, "federated server: %s\n", line.c_str());
    std::fflush(stderr);
  }

  // A pool's connection could not be served (no thread for it): the arm cannot run as
  // planned, so the server stops with why instead of waiting for that pool.
  void fail(const std::string& why) {
    {
      std::lock_guard lock(mutex_);
      if (failure_.empty()) failure_ = why;
    }
    cv_.notify_all();
  }
  // Throws the failure, if any. requires mutex_ held.
  void throw_if_failed_locked() const {
    if (!failure_.empty()) throw std::runtime_error("federated server: " + failure_);
  }

  // Frees the slot; a job it was handed but never sent goes back to the round's queue.
  void release(int64_t pool, const transport::Connection& conn) {
    {
      std::lock_guard lock(mutex_);
      if (slots_[pool].conn != &conn) return;
      Slot& sl = slots_[pool];
      if (sl.job && round_open_ && sl.job->start.round == round_job_.start.round)
        waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), sl.job->start.client),
                        sl.job->start.client);
      sl = Slot{};
      dispatch_locked();
    }
    cv_.notify_all();
  }

  // A topk client's error-feedback residual lives in the pool that trained it, so such a
  // client always goes to pool c mod P; any other client to whichever pool is free.
  bool may_train(int64_t client, int64_t pool) const { return s_.compress != "topk" || client % s_.pools() == pool; }

  // Hands every free pool the smallest waiting client it may train. Clients then finish
  // nearly in ascending order, the order the average adds them in, so the server holds
  // few updates (OrderedAverage). A waiting client that no connected pool may train is
  // left out of the round at once.
  void dispatch_locked() {
    if (!round_open_) return;
    for (int64_t p = 0; p < s_.pools(); ++p) {
      Slot& sl = slots_[p];
      if (!sl.conn || sl.busy) continue;
      const auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](int64_t c) { return may_train(c, p); });
      if (it == waiting_.end()) continue;
      RoundJob job = round_job_;
      job.start.client = *it;
      job.started_at = since(job.began);
      waiting_.erase(it);
      sl.job = std::move(job);
      sl.busy = true;
    }
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      bool takeable = false;
      for (int64_t p = 0; p < s_.pools() && !takeable; ++p) takeable = slots_[p].conn && may_train(*it, p);
      if (takeable) {
        ++it;
        continue;
      }
      Outcome out;
      out.client = *it;
      out.round = round_job_.start.round;
      out.error = s_.compress == "topk" ? "its pool (pool" + std::to_string(*it % s_.pools()) +
                                              ", which holds its topk residual) is not connected"
                                        : "no pool connected";
      outcomes_.push_back(std::move(out));
      it = waiting_.erase(it);
    }
  }

  // Opens a round: its clients wait, ascending, for free pools.
  void begin_round(RoundJob job, const std::vector<int64_t>& clients) {
    {
      std::lock_guard lock(mutex_);
      std::erase_if(outcomes_, [&](const Outcome& o) { return o.round < job.start.round; });
      round_job_ = std::move(job);
      waiting_ = clients;
      std::sort(waiting_.begin(), waiting_.end());
      round_open_ = true;
      dispatch_locked();
    }
    cv_.notify_all();
  }

  // Closes the round; returns the clients no pool took before then.
  std::vector<int64_t> end_round() {
    std::lock_guard lock(mutex_);
    round_open_ = false;
    return std::exchange(waiting_, {});
  }

  void serve(transport::Connection& conn, int64_t pool) {
    for (;;) {
      RoundJob job;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || slots_[pool].job.has_value(); });
        if (stopping_) {
          lock.unlock();
          try {
            conn.send(MessageType::shutdown, std::span<const std::byte>{}, 5s);
          } catch (const std::exception&) {
          }
          return;
        }
        job = std::move(*slots_[pool].job);
        slots_[pool].job.reset();
      }
      Outcome out = run_job(conn, pool, job);
      const bool failed = !out.ok;
      {
        std::lock_guard lock(mutex_);
        slots_[pool].busy = false;
        // A failed pool is gone at once, so no more clients are handed to it.
        if (failed) slots_[pool].conn = nullptr;
        outcomes_.push_back(std::move(out));
        dispatch_locked();
      }
      cv_.notify_all();
      if (failed) return;  // the connection is broken or the pool gave up
    }
  }

  // Sends a client's round to its pool and receives the update; failures become the outcome.
  Outcome run_job(transport::Connection& conn, int64_t pool, const RoundJob& job) {
    const int64_t client = job.start.client;
    Outcome out;
    out.client = client;
    out.pool = pool;
    out.round = job.start.round;
    out.started_at = job.started_at;
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
        const std::vector<float> delta = job.start.codec == "fp16" ? decode_fp16(p.bytes, n) : decode_topk(p.bytes, n);
        out.weights = *job.global;
        size_t at = 0;
        for (auto& w : out.weights)
          for (float& v : w) v += delta[at++];
      }
      payload.payload = {};
      out.done = transport::receive_message<UpdateDone>(conn, MessageType::control, reply_deadline);
      if (out.done.client != client || out.done.round != job.start.round)
        throw std::runtime_error("update for client " + std::to_string(out.done.client) + " round " +
                                 std::to_string(out.done.round) + " from pool " + std::to_string(pool) +
                                 ", which was asked for client " + std::to_string(client) + " round " +
                                 std::to_string(job.start.round));
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
    out.finished_at = since(job.began);
    return out;
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
  std::vector<Slot> slots_;          // one per pool
  std::deque<Outcome> outcomes_;
  RoundJob round_job_;               // the open round's job, its client not yet set
  std::vector<int64_t> waiting_;     // the open round's clients no pool has taken yet, ascending
  std::string failure_;              // why a pool's connection could not be served, once one could not
  bool round_open_ = false;
  bool stopping_ = false;

  void stop_clients() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      round_open_ = false;
    }
    cv_.notify_all();
  }
};

// Per pool: the clients it trained this round, its busy seconds (from handing it a client
// to that client's update), when it finished its last, and its idle seconds before the
// round's collection ended (nothing left to give it, or waiting for it to join).
nlohmann::json pool_times(const std::vector<Outcome>& got, int64_t pools, double collect) {
  nlohmann::json out = nlohmann::json::array();
  for (int64_t p = 0; p < pools; ++p) {
    nlohmann::json clients = nlohmann::json::array();
    double busy = 0.0, last = 0.0;
    for (const Outcome& o : got) {
      if (o.pool != p) continue;
      clients.push_back(o.client);
      busy += o.finished_at - o.started_at;
      last = std::max(last, o.finished_at);
    }
    out.push_back({{"pool", p}, {"clients", clients}, {"busy", busy}, {"finished_at", last},
                   {"idle", std::max(0.0, collect - busy)}});
  }
  return out;
}

void log_drop(int64_t round, const nlohmann::json& d) {
  std::fprintf(stderr, "federated server: round %lld leaves out client %lld: %s\n", static_cast<long long>(round),
               static_cast<long long>(d.at("client").get<int64_t>()), d.at("reason").get<std::string>().c_str());
  std::fflush(stderr);
}

// A strategy's state is whole copies of the model's shapes (FedAvgM: its velocity; FedOpt:
// m, v): copy 0 under strategy/, copy j under strategy.j/.
std::string strategy_prefix(size_t copy) { return copy == 0 ? "strategy/" : "strategy." + std::to_string(copy) + "/"; }

// Checkpoint: global weights, strategy state and the position, one safetensors file.
void save_server_checkpoint(const std::filesystem::path& path, const engine::NamedTensors& names_like,
                            const Params& global, const Params& strategy_state, const Position& pos) {
  engine::NamedTensors tensors;
  for (size_t i = 0; i < global.size(); ++i)
    tensors.emplace_back("model/" + names_like[i].first,
                         engine::Tensor::from_vector(names_like[i].second.shape(), global[i]));
  for (size_t i = 0; i < strategy_state.size(); ++i) {
    const auto& [name, like] = names_like[i % names_like.size()];
    tensors.emplace_back(strategy_prefix(i / names_like.size()) + name,
                         engine::Tensor::from_vector(like.shape(), strategy_state[i]));
  }
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
  strategy_state.clear();
  for (size_t copy = 0;; ++copy) {
    Params part;
    take(strategy_prefix(copy), part, false);
    if (part.empty()) break;
    strategy_state.insert(strategy_state.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
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
  const int64_t per_round = clients_per_round(s.clients, s.fraction, s.min_clients);
  DpFedAvg dp(s.dp_config(), s.clients, per_round, cfg.seed);

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
  int64_t planned_samples = 0;  // what the rounds so far would have trained had every sampled client answered
  if (ctx.resume) {
    Params strategy_state;
    if (load_server_checkpoint(checkpoint_path(ctx.arm_dir), state, global, strategy_state, pos)) {
      strategy->load_state(std::move(strategy_state));
      if (pos.extra.contains("totals")) totals = pos.extra["totals"];
      planned_samples = pos.extra.value("planned_samples", int64_t{0});
      dp.resume(pos.extra.value("dp_rounds", int64_t{0}));
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
           {"counts", partition.counts}, {"histograms", hist}});
  }

  FlServer fl(ctx, s);
  transport::ServerOptions so;
  so.address = ctx.coordinator->options().host;
  so.port = 0;
  so.token = transport::make_token();
  so.tls = ctx.coordinator->options().tls;
  so.max_connections = static_cast<size_t>(s.pools()) + 16;
  so.log = [](const std::string& line) { std::fprintf(stderr, "federated server: %s\n", line.c_str()); };
  so.on_thread_failure = [&fl](const std::string& why) { fl.fail(why); };
  transport::Server server(so, [&fl](transport::Connection& c, const transport::Hello& h) { fl.handle(c, h); });
  // However the rounds end (a checkpoint on a full disk throws), the handlers parked on
  // the clients' connections are released before the server joins them.
  const ReleaseOnExit release([&fl] { fl.stop_clients(); });
  ctx.coordinator->kv_set(server_token_key(ctx.arm), so.token);
  ctx.coordinator->kv_set(server_address_key(ctx.arm), so.address + ":" + std::to_string(server.port()));

  // Every pool joins before the first round (up to join_timeout_s; late ones may join later).
  {
    std::unique_lock lock(fl.mutex_);
    fl.cv_.wait_for(lock, std::chrono::duration<double>(s.join_timeout_s), [&] {
      return !fl.failure_.empty() ||
             std::all_of(fl.slots_.begin(), fl.slots_.end(), [](const Slot& sl) { return sl.conn != nullptr; });
    });
    fl.throw_if_failed_locked();
  }

  const auto schedule = make_schedule(cfg.optimizer, cfg.schedule, cfg.batch, s.rounds);
  const int64_t train_size = wl.train_size();
  for (int64_t round = pos.step + 1; round <= s.rounds; ++round) {
    // The round's memory figures count from here: set-up and the last round's checkpoint
    // copies are not part of this round's work.
    engine::reset_memory_peaks();
    Stopwatch round_clock;
    const std::vector<int64_t> sampled = sample_clients(s.clients, per_round, cfg.seed, round);
    RoundJob job;
    job.start = RoundStart{round, -1, schedule->lr_at(round - 1), strategy->proximal_mu(), s.compress,
                           s.topk_fraction};
    job.global = std::make_shared<const Params>(global);
    job.names = &names;
    job.shapes = &shapes;
    job.began = Clock::now();
    const auto deadline = job.began + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(s.deadline_s));
    nlohmann::json dropped = nlohmann::json::array();
    const double lr = job.start.lr;
    fl.begin_round(std::move(job), sampled);

    // Collect until every sampled client answered or failed, or the deadline. Each update
    // goes to the aggregator as it arrives (the mean holds only those ahead of a slower
    // client, a robust aggregator all); `got` keeps the rest of each outcome, without its weights.
    std::vector<Outcome> got;
    std::vector<size_t> sizes;
    for (const std::vector<float>& t : global) sizes.push_back(t.size());
    RoundAggregator average(s.aggregator_config(), sampled, std::move(sizes));
    while (got.size() < sampled.size()) {
      std::vector<Outcome> fresh;
      {
        std::unique_lock lock(fl.mutex_);
        auto arrived = [&] {
          return !fl.failure_.empty() ||
                 std::any_of(fl.outcomes_.begin(), fl.outcomes_.end(), [&](const Outcome& o) { return o.round == round; });
        };
        fl.cv_.wait_until(lock, deadline, arrived);
        fl.throw_if_failed_locked();
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
            const int64_t weight = dp.admit(o.weights, global, o.done.samples);
            average.add({o.client, weight, std::move(o.weights)});
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
    const std::vector<int64_t> unstarted = fl.end_round();
    const double collect = round_clock.seconds();
    nlohmann::json per_client = nlohmann::json::array();
    std::vector<int64_t> hist(static_cast<size_t>(partition.num_classes), 0);
    int64_t round_samples = 0, round_down = 0, round_up = 0, round_messages = 0, weight_total = 0;
    double loss_weighted = 0.0, t_download = 0.0, t_compute = 0.0, t_upload = 0.0, fastest = 1e300;
    StepRecord r;
    std::sort(got.begin(), got.end(), [](const Outcome& a, const Outcome& b) { return a.client < b.client; });
    const std::string limit = "the deadline of " + std::to_string(s.deadline_s) + " s";
    for (const int64_t c : sampled)
      if (std::find(unstarted.begin(), unstarted.end(), c) != unstarted.end())
        dropped.push_back({{"client", c}, {"reason", "not started before " + limit + ": every pool was busy"}});
      else if (std::none_of(got.begin(), got.end(), [&](const Outcome& o) { return o.client == c; }))
        dropped.push_back({{"client", c}, {"reason", "missed " + limit}});
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
                            {"pool", o.pool}, {"started_at", o.started_at}, {"download", o.download},
                            {"compute", compute}, {"upload", d.upload}, {"finished_at", o.finished_at}});
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
    bool aggregated = average.added() >= s.min_clients;
    std::string refused;  // why a robust aggregator could not take the round's updates
    if (aggregated) {
      std::optional<Params> combined;
      try {
        combined = average.finish();
      } catch (const std::invalid_argument& e) {
        refused = e.what();
        aggregated = false;
      }
      if (combined) {
        dp.release(*combined, round, average.added());
        global = strategy->aggregate(global, std::move(*combined), round);
      }
    }
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
    for (const int64_t c : sampled)
      planned_samples += local_samples(static_cast<int64_t>(partition.clients[c].size()), cfg.batch, s.local_epochs);
    totals["bytes_sent"] = totals["bytes_sent"].get<int64_t>() + round_down;
    totals["bytes_received"] = totals["bytes_received"].get<int64_t>() + round_up;
    totals["messages"] = totals["messages"].get<int64_t>() + round_messages;
    r.step = round;
    r.samples = pos.samples;
    r.epoch = static_cast<double>(pos.samples) / static_cast<double>(train_size);
    r.loss = weight_total > 0 ? loss_weighted / static_cast<double>(weight_total) : 0.0;
    r.lr = lr;
    r.comm_exposed = t_download + t_upload;
    r.bytes_sent = totals["bytes_sent"].get<int64_t>();
    r.bytes_received = totals["bytes_received"].get<int64_t>();
    r.messages = totals["messages"].get<int64_t>();
    r.eval = Evaluation{wl.metric_name(), quality, wl.test_size(), eval_s};
    r.wall = wall0 + clock.seconds();
    nlohmann::json rec = to_json(r, ctx.arm, ctx.role, ctx.rank, round_mem);
    rec["eval"]["memory_peak"] = eval_memory_peak;
    rec["planned_samples"] = planned_samples;
    rec["round"] = {
        {"index", round},
        {"rounds", s.rounds},
        {"strategy", strategy->name()},
        {"aggregator", s.aggregator},
        {"compress", s.compress},
        {"sampled", sampled},
        {"completed", per_client.size()},
        {"aggregated", aggregated},
        {"updates_held_peak", average.peak_held()},
        {"dropped", dropped},
        {"clients", per_client},
        {"pools", pool_times(got, s.pools(), collect)},
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
                        (aggregated ? "" : refused.empty() ? ", too few to average (the weights were kept)"
                                                           : ", not aggregated (the weights were kept): " + refused) +
                        (dropped.empty() ? "" : "; first left out: client " + dropped[0]["client"].dump() + ", " +
                                                    dropped[0]["reason"].get<std::string>());
    if (dp.enabled()) rec["privacy"] = dp.record();
    write(rec);
    pos.wall = wall0 + clock.seconds();
    records.sync();  // the checkpoint never points past what a power loss keeps
    pos.records_bytes = records.bytes();
    pos.extra = {{"totals", totals}, {"dp_rounds", dp.rounds()}, {"planned_samples", planned_samples}};
    save_server_checkpoint(checkpoint_path(ctx.arm_dir), state, global, strategy->state(), pos);
  }
  load_params(*model, global);
  engine::save_safetensors(final_weights_path(ctx.arm_dir).string(), model->state_dict());
  fl.stop_clients();
  server.stop();
}

}  // namespace quartet::trainers::federated

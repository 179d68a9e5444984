#include "runner/launcher.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "analysis/repeats.h"
#include "analysis/summary.h"
#include "engine/safetensors.h"
#include "engine/threads.h"
#include "runner/certs_command.h"
#include "runner/environment.h"
#include "runner/process.h"
#include "runner/progress.h"
#include "runner/results.h"
#include "runner/token_file.h"
#include "runner/run_folder.h"
#include "runner/wiring.h"
#include "trainers/metrics.h"
#include "trainers/regime.h"
#include "transport/connection.h"
#include "transport/coordinator.h"
#include "workloads/models.h"
#include "workloads/sampler.h"

namespace quartet::runner {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::atomic<int> g_signal{0};

void on_signal(int sig) { g_signal = sig; }

class SignalGuard {
 public:
  SignalGuard() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalGuard() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

std::string timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw InputError(p.string() + ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw InputError(p.string() + ": not valid JSON: " + json_error_text(e));
  }
}

// One role process of the running arm and how far its record file has been read.
struct Child {
  std::string role;
  pid_t pid = -1;
  fs::path records;
  fs::path log;
  std::streamoff offset = 0;
  std::string partial;
  int status = -1;  // exit status once reaped
  bool done = false;
  bool remote = false;  // started by someone on another host; seen through the coordinator
  std::string vanished;  // why the coordinator lost it, once it has
  std::unique_ptr<OutputTee> output;  // a local role's stdout and stderr, on their way to `log`
};

// Starts a role with its output kept by c.output on its way to c.log.
void spawn_role(Child& c, const fs::path& exe, const fs::path& run_dir, const std::string& arm, bool resume,
                int threads, const transport::Coordinator& coordinator) {
  SpawnOptions o;
  o.args = {"role", "--run-dir", run_dir.string(), "--arm", arm, "--role", c.role};
  if (resume) o.args.push_back("--resume");
  o.env = {{"QUARTET_THREADS", std::to_string(threads)},
           {"QUARTET_TOKEN", coordinator.token()},
           {"QUARTET_COORDINATOR", coordinator.address()}};
  // The run's TLS settings (absolute paths) go the token's way: never in argv.
  if (const auto& tls = coordinator.tls()) {
    const transport::TlsFiles& f = tls->files();
    o.env.insert({{"QUARTET_TLS_CERT", f.cert}, {"QUARTET_TLS_KEY", f.key}, {"QUARTET_TLS_CA", f.ca},
                  {"QUARTET_TLS_CLIENT_CA", f.client_ca}});
  }
  int output = -1;
  o.output = &output;
  c.pid = spawn_process(exe, o);
  c.output = std::make_unique<OutputTee>(output, c.log);
}

// New complete lines of a child's record file.
std::vector<json> read_new_records(Child& c) {
  std::vector<json> out;
  std::ifstream in(c.records, std::ios::binary);
  if (!in) return out;
  in.seekg(c.offset);
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c.offset += static_cast<std::streamoff>(chunk.size());
  c.partial += chunk;
  size_t start = 0, end;
  while ((end = c.partial.find('\n', start)) != std::string::npos) {
    try {
      out.push_back(json::parse(c.partial.substr(start, end - start)));
    } catch (const json::parse_error&) {
    }
    start = end + 1;
  }
  c.partial.erase(0, start);
  return out;
}

// The role's last line of output: its error when it failed. Kept in memory, so a role that
// could not write its log (a full disk) still says why.
std::string last_error_line(Child& c) {
  if (!c.output) return "no message";
  c.output->wait();
  const std::string last = c.output->last_line();
  return last.empty() ? "no message (see " + c.log.string() + ")" : last;
}

struct ArmOutcome {
  std::string status;  // finished, failed, interrupted
  json summary;
};

// The coordinator's host and port from --listen (HOST or HOST:PORT; port 0: a fresh one).
// Throws InputError naming --listen when it is not an address and port this host can take.
std::pair<std::string, uint16_t> listen_address(const std::string& listen) {
  std::pair<std::string, uint16_t> out{listen, 0};
  try {
    if (listen.rfind(':') != std::string::npos) out = transport::parse_host_port(listen);
  } catch (const std::invalid_argument& e) {
    throw InputError("--listen " + listen + ": " + e.what());
  }
  return out;
}

// The run's coordinator and what it hears: remote roles' records go into the same
// record files as local roles' own appends; vanished roles fail their arm.
class RunCoordinator {
 public:
  RunCoordinator(const fs::path& run_dir, const std::string& listen, const std::string& advertise,
                 std::shared_ptr<const transport::Tls> tls)
      : run_dir_(run_dir) {
    transport::CoordinatorOptions o;
    o.tls = std::move(tls);
    std::tie(o.host, o.port) = listen_address(listen);
    if (const char* t = std::getenv("QUARTET_TOKEN"); t && *t) o.token = t;
    o.on_record = [this](const transport::RoleId& from, std::string_view record) { write(from, record); };
    o.on_vanished = [this](const transport::RoleId& role, const std::string& reason) {
      std::lock_guard lock(mutex_);
      vanished_[role.arm + "/" + role.role] = reason;
    };
    // A role that cannot be served (out of threads) cannot take part: the arm fails.
    o.on_thread_failure = [this](const std::string& why) {
      std::lock_guard lock(mutex_);
      if (thread_failure_.empty()) thread_failure_ = "the coordinator " + why;
    };
    const std::string host =
        !advertise.empty() ? advertise : transport::is_any_address(o.host) ? transport::routable_address() : o.host;
    listens_beyond_this_host_ = o.host != "localhost" && !o.host.starts_with("127.");
    try {
      coordinator_ = std::make_unique<transport::Coordinator>(std::move(o));
    } catch (const std::exception& e) {
      throw InputError(std::string("--listen ") + listen + ": " + e.what());
    }
    advertised_ = host + ":" + std::to_string(coordinator_->port());
  }

  // Whether roles on other hosts can reach it (it listens on more than loopback).
  bool listens_beyond_this_host() const { return listens_beyond_this_host_; }

  const transport::Coordinator& coordinator() const { return *coordinator_; }
  // HOST:PORT for roles on other hosts (RunOptions::advertise).
  const std::string& advertised() const { return advertised_; }
  transport::Coordinator& coordinator() { return *coordinator_; }

  // Why `role` of `arm` vanished, or "" while it has not.
  std::string vanished(const std::string& arm, const std::string& role) const {
    std::lock_guard lock(mutex_);
    auto it = vanished_.find(arm + "/" + role);
    return it == vanished_.end() ? "" : it->second;
  }

  // Why a remote role's record of `arm` could not be written, or why a role's connection
  // could not be served; "" while neither has happened.
  std::string coordinator_failure(const std::string& arm) const {
    std::lock_guard lock(mutex_);
    if (!thread_failure_.empty()) return thread_failure_;
    auto it = write_failures_.find(arm);
    return it == write_failures_.end() ? "" : it->second;
  }
  // An arm starts with no connection failure of the arm before it.
  void forget_thread_failure() {
    std::lock_guard lock(mutex_);
    thread_failure_.clear();
  }

  // Whether a remote role has joined, and whether it has said goodbye.
  std::pair<bool, bool> remote_state(const std::string& arm, const std::string& role) const {
    for (const transport::RoleStatus& r : coordinator_->roles())
      if (r.id.arm == arm && r.id.role == role) return {true, r.left};
    return {false, false};
  }

  void close_writers() {
    std::lock_guard lock(mutex_);
    writers_.clear();
  }

 private:
  void write(const transport::RoleId& from, std::string_view record) {
    json j = json::parse(record, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return;  // not a record: nothing to keep
    std::lock_guard lock(mutex_);
    const std::string key = from.arm + "/" + from.role;
    auto& w = writers_[key];
    try {
      if (!w) {
        const fs::path dir = run_dir_ / from.arm / "roles";
        if (!fs::is_directory(dir)) return;  // an arm this run does not have
        w = std::make_unique<trainers::JsonlWriter>(trainers::records_path(run_dir_ / from.arm, from.role).string());
      }
      w->write(j);
    } catch (const std::exception& e) {
      // A record that cannot be kept (a full disk) fails its arm, naming the cause.
      write_failures_.emplace(from.arm, "cannot keep role " + from.role + "'s records: " + e.what());
    }
  }

  fs::path run_dir_;
  bool listens_beyond_this_host_ = false;
  std::map<std::string, std::string> write_failures_;  // by arm: the first record it could not write
  std::string thread_failure_;  // a role's connection that could not be served, and why
  std::unique_ptr<transport::Coordinator> coordinator_;
  std::string advertised_;
  mutable std::mutex mutex_;
  std::map<std::string, std::string> vanished_;
  std::map<std::string, std::unique_ptr<trainers::JsonlWriter>> writers_;
};

// How long a role asked to stop (SIGTERM) has before it is killed (SIGKILL).
constexpr auto kStopGrace = std::chrono::seconds(10);

// How long a remote role may take to join before its arm fails.
constexpr auto kRemoteJoinTimeout = std::chrono::minutes(10);

// Cores idle over a short look at /proc/stat (the whole machine: idle and iowait time
// against all time); `cores` when it cannot be read.
int idle_cores(int cores) {
  auto sample = [](uint64_t& idle, uint64_t& total) {
    std::ifstream in("/proc/stat");
    std::string cpu;
    in >> cpu;
    if (cpu != "cpu") return false;
    idle = total = 0;
    for (int i = 0; i < 8; ++i) {
      uint64_t v = 0;
      if (!(in >> v)) return i >= 4;
      total += v;
      if (i == 3 || i == 4) idle += v;
    }
    return true;
  };
  uint64_t idle0 = 0, total0 = 0, idle1 = 0, total1 = 0;
  if (!sample(idle0, total0)) return cores;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  if (!sample(idle1, total1) || total1 <= total0) return cores;
  const double share = static_cast<double>(idle1 - idle0) / static_cast<double>(total1 - total0);
  return static_cast<int>(std::floor(share * cores + 0.25));
}

// The coordinator hands a joining role its arm's spec and world size.
void declare_arm(RunCoordinator& rc, const ExperimentSpec& spec, const ArmSpec& arm) {
  rc.coordinator().declare_arm(arm.name, static_cast<int>(arm.regime_entry().roles(*arm.settings).size()),
                               json{{"spec", spec.json}, {"arm", arm.name}}.dump());
}

}  // namespace

int arm_threads(const ArmSpec& arm) {
  if (arm.threads > 0) return arm.threads;
  const int local_roles =
      static_cast<int>(arm.regime_entry().roles(*arm.settings).size() - arm.remote.size());
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, local_roles));
}

namespace {

// The training samples an arm plans: its epochs of whole batches, or max_steps of them.
int64_t planned_samples(const ArmSpec& arm, int64_t train_size) {
  const trainers::TrainConfig& cfg = arm.train;
  int64_t total = cfg.epochs * workloads::batches_per_epoch(train_size, cfg.batch) * cfg.batch;
  if (cfg.max_steps > 0) total = std::min(total, cfg.max_steps * cfg.batch);
  return total;
}

ArmOutcome run_arm(const fs::path& exe, const fs::path& run_dir, const ExperimentSpec& spec, const ArmSpec& arm,
                   int index, int64_t train_size, bool resume, Progress& progress, RunCoordinator& rc) {
  const fs::path arm_dir = run_dir / arm.name;
  std::error_code made;
  fs::create_directories(arm_dir / "roles", made);
  if (made) {
    ArmOutcome out;
    out.status = "failed";
    out.summary = {{"arm", arm.name}, {"regime", arm.regime}, {"status", out.status},
                   {"error", "cannot make " + (arm_dir / "roles").string() + ": " + made.message()}};
    progress.error(arm.name, out.summary["error"].get<std::string>());
    return out;
  }
  const trainers::TrainConfig& cfg = arm.train;
  const trainers::Regime* regime = &arm.regime_entry();
  const std::vector<std::string> roles = regime->roles(*arm.settings);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int threads = arm_threads(arm);
  if (arm.threads == 0 && threads > 1) {
    // Compute threads wait for each other at every op: one that the OS has to share
    // with other work stalls the rest (a 2-thread arm on a busy 2-core machine ran 150x
    // slower than on 1 thread). Chosen threads use only the cores that are idle now.
    const int idle = idle_cores(cores);
    if (idle < threads) {
      const int fewer = std::max(1, idle);
      std::fprintf(stderr, "quartet: %s: other work keeps %d of %d cores busy: %d compute thread%s per process, not %d\n",
                   arm.name.c_str(), cores - idle, cores, fewer, fewer == 1 ? "" : "s", threads);
      threads = fewer;
    }
  }
  declare_arm(rc, spec, arm);
  rc.forget_thread_failure();

  progress.arm_started(arm.name, index, planned_samples(arm, train_size), trainers::clock_role_name(roles));

  std::vector<Child> children;
  std::string spawn_failure;
  for (const std::string& role : roles) {
    Child c;
    c.role = role;
    c.records = trainers::records_path(arm_dir, role);
    c.log = arm_dir / "roles" / (role + ".log");
    c.remote = std::find(arm.remote.begin(), arm.remote.end(), role) != arm.remote.end();
    children.push_back(std::move(c));
  }
  for (Child& c : children) {
    if (c.remote) {
      std::cerr << "quartet: arm " << arm.name << " waits for role " << c.role
                << " from another host (a cluster's `quartet launch` there, or by hand):\n"
                << "  QUARTET_TOKEN="
                << (fs::exists(run_dir / "token") ? "$(cat " + (run_dir / "token").string() + ")" : "<the run's token>")
                << " "
                << (rc.coordinator().tls() ? "QUARTET_TLS_CERT=<cert> QUARTET_TLS_KEY=<key> QUARTET_TLS_CA=<ca> " : "")
                << "quartet role --coordinator "
                << rc.advertised() << " --arm " << arm.name << " --role " << c.role << "\n";
      continue;
    }
    try {
      spawn_role(c, exe, run_dir, arm.name, resume, threads, rc.coordinator());
    } catch (const std::exception& e) {
      // Out of processes or threads (EAGAIN): the arm fails now, naming the role.
      spawn_failure = "cannot start role " + c.role + ": " + e.what();
      c.done = true;
      break;
    }
  }
  for (Child& c : children)
    if (c.pid < 0 && !c.remote) c.done = true;  // never started

  std::string failure = spawn_failure;
  bool interrupted = false;
  const auto started = std::chrono::steady_clock::now();
  bool stepped = false;  // a step record has come: the arm has started training
  auto drain = [&](Child& c) {
    for (const json& r : read_new_records(c)) {
      stepped = stepped || r.value("type", "") == "step";
      progress.step(arm.name, r);
    }
  };
  // A role lost: the arm fails, unless the regime can do without that role.
  // When several roles fail together, one that vanished (a remote role's connection lost
  // without a goodbye) or was killed by a signal we did not send (OOM killer, kill -9) is
  // the cause and the others' errors (a peer reset) its consequence: it is named first.
  bool stopping_roles = false;
  std::vector<std::string> lost_roles;  // roles the arm went on without: it ends degraded
  auto lost = [&](const Child& c, const std::string& why, bool cause = false) {
    if (g_signal) return;
    // A role the regime can do without may be lost once the arm trains; lost before its
    // first step (it could not start: out of tasks, say), it leaves the others waiting
    // for it, and the arm fails.
    if (!regime->essential(c.role) && stepped) {
      if (!stopping_roles) lost_roles.push_back(why);
      progress.error(arm.name, why + "; the arm carries on without it");
    } else if (failure.empty()) failure = why;
    else if (cause) failure = why + "; then " + failure;
  };
  std::optional<std::chrono::steady_clock::time_point> failed_at;
  std::optional<std::chrono::steady_clock::time_point> essentials_done;
  auto fail = [&](const std::string& why) {
    if (failure.empty() && !g_signal) failure = why;
  };
  for (;;) {
    if (const std::string why = rc.coordinator_failure(arm.name); !why.empty()) fail(why);
    bool all_done = true;
    for (Child& c : children) {
      drain(c);
      if (c.done) continue;
      if (const std::string why = rc.vanished(arm.name, c.role); !why.empty() && c.remote) {
        c.done = true;
        lost(c, "role " + c.role + " vanished: " + why, true);
        continue;
      }
      if (c.remote) {
        const auto [joined, left] = rc.remote_state(arm.name, c.role);
        if (left) {
          c.done = true;
          drain(c);
        } else {
          all_done = false;
          if (!joined && std::chrono::steady_clock::now() - started > kRemoteJoinTimeout)
            fail("remote role " + c.role + " did not join within 10 minutes");
        }
        continue;
      }
      int status = 0;
      const pid_t r = waitpid(c.pid, &status, WNOHANG);
      if (r == c.pid) {
        c.done = true;
        c.status = status;
        drain(c);
        if (!c.vanished.empty())
          lost(c, "role " + c.role + " vanished: " + c.vanished);
        else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
          lost(c, "role " + c.role + " failed (" + describe_exit(status) + "): " + last_error_line(c),
               WIFSIGNALED(status) && !stopping_roles);
      } else {
        all_done = false;
        if (c.vanished.empty()) {
          // Alive but silent to the coordinator: hung. Stop it; it is reaped next time round.
          c.vanished = rc.vanished(arm.name, c.role);
          if (!c.vanished.empty()) kill(c.pid, SIGKILL);
        }
      }
    }
    if (all_done) break;
    // Once the essential roles are done, the others get a grace period to finish.
    bool essentials_running = false;
    for (const Child& c : children) essentials_running = essentials_running || (!c.done && regime->essential(c.role));
    if (!essentials_running && !essentials_done) essentials_done = std::chrono::steady_clock::now();
    if (essentials_done && std::chrono::steady_clock::now() - *essentials_done > std::chrono::seconds(30)) {
      const bool insist = std::chrono::steady_clock::now() - *essentials_done > std::chrono::seconds(30) + kStopGrace;
      for (Child& c : children)
        if (!c.done && !c.remote) {
          stopping_roles = true;
          kill(c.pid, insist ? SIGKILL : SIGTERM);
        }
    }
    if (g_signal || !failure.empty()) {
      interrupted = interrupted || g_signal;
      if (!failed_at) failed_at = std::chrono::steady_clock::now();
      // A role that does not stop when asked (stopped, or stuck in the kernel) is killed.
      const bool insist = std::chrono::steady_clock::now() - *failed_at > kStopGrace;
      bool local_left = false;
      for (Child& c : children)
        if (!c.done && !c.remote) {
          stopping_roles = true;
          kill(c.pid, insist ? SIGKILL : SIGTERM);
          local_left = true;
        }
      // Remote roles cannot be stopped from here; they stop when the coordinator closes.
      // A remote role that vanished at the same moment may be the cause: a second more to
      // hear of it.
      if (!local_left && (g_signal || std::chrono::steady_clock::now() - *failed_at > std::chrono::seconds(1)))
        break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  interrupted = interrupted || g_signal;

  std::vector<std::vector<json>> records;
  for (const Child& c : children) {
    try {
      records.push_back(fs::exists(c.records) ? analysis::read_jsonl(c.records) : std::vector<json>{});
    } catch (const std::exception& e) {
      if (failure.empty()) failure = e.what();
      records.emplace_back();
    }
  }
  ArmOutcome out;
  out.summary = analysis::summarize_arm(arm.name, arm.regime, records, cfg.target, train_size);
  out.status = analysis::arm_status(interrupted, failure, out.summary, lost_roles);
  out.summary["status"] = out.status;
  out.summary["threads_per_process"] = threads;
  if (out.status == "failed") {
    out.summary["error"] = failure;
    progress.error(arm.name, failure);
  } else if (out.status == "diverged" || out.status == "degraded") {
    out.summary["problem"] = failure;
    progress.error(arm.name, out.status + ": " + failure);
  }
  try {
    write_json_atomically(arm_dir / "summary.json", out.summary);
  } catch (const std::exception& e) {
    // The arm's figures are lost with its summary: it failed, whatever its roles did.
    out.status = "failed";
    out.summary["status"] = out.status;
    out.summary["error"] = std::string("cannot write the arm's summary: ") + e.what();
    progress.error(arm.name, out.summary["error"].get<std::string>());
  }
  progress.arm_finished(arm.name, out.summary);
  return out;
}

// Every arm's batch fits the training set (a volume workload's counts volumes); InputError
// naming the arm's field before anything starts, not a role failing later.
void check_batches_fit(const ExperimentSpec& spec, int64_t train_size) {
  for (size_t i = 0; i < spec.arms.size(); ++i)
    if (spec.arms[i].train.batch > train_size)
      throw InputError("spec.arms[" + std::to_string(i) + "].train.batch: " +
                       std::to_string(spec.arms[i].train.batch) + " is larger than the training set (" +
                       std::to_string(train_size) + " samples); the last partial batch of an epoch is dropped, so "
                       "no step would run");
}

// An arm that ran to its end, well or not (a resume keeps it).
bool ended(const std::string& status) {
  return status == "finished" || status == "degraded" || status == "diverged";
}

// Whether a resume keeps `arm` of the pass in `dir` (its status there) as it was.
bool kept_arm(const json& status, const fs::path& dir, const ArmSpec& arm, bool resume) {
  return resume && ended(status["arms"].value(arm.name, "")) && fs::exists(dir / arm.name / "summary.json");
}


// The worst of the arms': interrupted, failed, diverged, degraded, finished.
std::string run_status(bool interrupted, bool failed, const std::vector<json>& summaries) {
  if (interrupted) return "interrupted";
  if (failed) return "failed";
  for (const char* bad : {"diverged", "degraded"})
    for (const json& s : summaries)
      if (s.value("status", "") == bad) return bad;
  return "finished";
}

fs::path default_out(const ExperimentSpec& spec) {
  const fs::path base = fs::path("results") / (spec.name + "-" + timestamp());
  fs::path p = base;
  for (int i = 2; fs::exists(p); ++i) p = base.string() + "-" + std::to_string(i);
  return p;
}

// The run's initial weights, one file per model its arms train: the workload's model
// from --init (checked against the model) or the seed; an arm's own model from the seed.
void write_initial_weights(const ExperimentSpec& spec, const workloads::Workload& wl, const std::string& init,
                           const fs::path& run_dir) {
  std::set<fs::path> written;
  auto write = [&](const std::string& model_name, const fs::path& dest, const std::string& from) {
    if (!written.insert(dest).second) return;
    std::shared_ptr<engine::Model> model = wl.make_model(model_name, spec.seed);
    if (!from.empty()) {
      try {
        engine::load_state_dict(*model, engine::read_safetensors(from).tensors);
      } catch (const std::exception& e) {
        throw InputError("--init " + from + ": " + e.what());
      }
    }
    engine::save_safetensors(dest.string(), model->state_dict(), {{"format", "pt"}});
  };
  write(spec.workload.model, run_dir / "init.safetensors", init);
  for (const ArmSpec& arm : spec.arms) write(arm.model, initial_weights_path(run_dir, spec, arm), "");
}

// A run folder's run.json; one with no arms (none for a resume to keep) when it has none.
json read_status(const fs::path& dir) {
  json status = fs::exists(dir / "run.json") ? read_json(dir / "run.json") : json::object();
  if (!status.is_object()) status = json::object();
  if (!status.contains("arms") || !status["arms"].is_object()) status["arms"] = json::object();
  return status;
}

// What a person should know about arms that ran to their end but learnt nothing yet: a
// segmentation arm whose mean Dice is still about 0 marks every voxel as one class, which
// is where unet3d sits for its first ten or so epochs (docs/medical3d.md has the curve).
std::vector<std::string> training_hints(const ExperimentSpec& spec, const std::vector<json>& summaries) {
  std::vector<std::string> hints;
  for (size_t i = 0; i < spec.arms.size() && i < summaries.size(); ++i) {
    const json& s = summaries[i];
    if (s.value("status", "") != "finished" || !s.contains("final_quality") || !s["final_quality"].is_number()) continue;
    if (workloads::model_info(spec.arms[i].model).task != workloads::kVolumeSegmentation) continue;
    const double dice = s["final_quality"].get<double>();
    if (dice >= 0.1) continue;
    char text[512];
    std::snprintf(text, sizeof text,
                  "%s: mean Dice %.4f after %.1f epochs: the model has not learnt to segment yet and marks every "
                  "voxel as one class or a few. unet3d on 16 CT phantoms at 32^3 stays near 0 for about 10 epochs and "
                  "passes 0.8 after about 32 (experiments/ct-phantom.json, docs/medical3d.md): give it more epochs.",
                  spec.arms[i].name.c_str(), dice, s.value("epochs", 0.0));
    hints.emplace_back(text);
  }
  return hints;
}

// The spec of repeat `k`: the run's with the repeat's seed, run once.
ExperimentSpec repeat_spec(const ExperimentSpec& spec, int k) {
  if (k == 1) return spec;
  json j = spec.json;
  j["seed"] = analysis::repeat_seed(spec.seed, k);
  j["repeats"] = 1;
  return parse_spec(std::move(j));
}

// RUN/repeats/<k>: a run folder of its own for repeat k (its spec, initial weights from
// its seed or --init, and run.json), so its arms run and resume like the run's.
void make_repeat_folder(const fs::path& run_dir, const ExperimentSpec& spec, int k, const workloads::Workload& wl,
                        const std::string& init) {
  const fs::path dir = analysis::repeat_dir(run_dir, k);
  if (fs::exists(dir / "run.json")) return;
  fs::create_directories(dir);
  const ExperimentSpec mine = repeat_spec(spec, k);
  write_json_atomically(dir / "spec.json", {{"spec", mine.json}, {"environment", environment()}, {"repeat", k}});
  write_initial_weights(mine, wl, init, dir);
  write_json_atomically(dir / "run.json", {{"status", "running"}, {"arms", json::object()}});
}

// The coordinator of the pass over the arms in `dir`, listening, with the first arm to
// run declared at once: a remote role that joins before its processes start (ranks
// started by a cluster launcher come in any order) still gets its spec.
std::unique_ptr<RunCoordinator> pass_coordinator(const fs::path& dir, const ExperimentSpec& spec, bool resume,
                                                 const RunOptions& opt,
                                                 const std::shared_ptr<const transport::Tls>& tls) {
  auto coordinator = std::make_unique<RunCoordinator>(dir, opt.listen, opt.advertise, tls);
  const json status = read_status(dir);
  for (const ArmSpec& arm : spec.arms)
    if (!kept_arm(status, dir, arm, resume)) {
      declare_arm(*coordinator, spec, arm);
      break;
    }
  return coordinator;
}

struct PassOutcome {
  std::vector<json> summaries;  // the arms that ran or were kept, in the spec's order
  bool failed = false, interrupted = false;
  std::string write_error;  // the first file the coordinator could not write, and why
};

// One pass over the arms in `dir` (the run folder, or a repeat's), with a coordinator of
// its own: the arms a resume keeps are read back, the others run. dir's run.json and
// summary.md say how it went.
PassOutcome run_pass(const fs::path& dir, const ExperimentSpec& spec, bool resume, int64_t train_size,
                     const RunOptions& opt, const std::shared_ptr<const transport::Tls>& tls, Progress& progress,
                     std::unique_ptr<RunCoordinator> started, const std::function<void()>& set_up) {
  const fs::path exe = self_executable();
  json status = read_status(dir);
  std::unique_ptr<RunCoordinator> own =
      started ? std::move(started) : pass_coordinator(dir, spec, resume, opt, tls);
  RunCoordinator& coordinator = *own;
  // An arm a resume keeps as it was.
  auto kept = [&](const ArmSpec& arm) { return kept_arm(status, dir, arm, resume); };
  const bool own_token = std::getenv("QUARTET_TOKEN") == nullptr;
  if (own_token) {
    // Roles on other hosts need the token: it waits in the run folder, readable by its owner only.
    write_file_atomically(dir / "token", coordinator.coordinator().token() + "\n", 0600);
  }
  if (coordinator.listens_beyond_this_host())
    std::cerr << "quartet: the coordinator listens on " << coordinator.coordinator().address()
              << ", open to other hosts, which reach it at " << coordinator.advertised() << "; a role joins with "
              << (own_token ? "the run's token, in " + (dir / "token").string() + " (readable by you only)"
                            : std::string("the QUARTET_TOKEN given to this run"))
              << "\n";
  set_up();
  PassOutcome out;
  // A file the coordinator cannot write (a full disk) ends the pass failed, with the cause.
  auto save = [&](const auto& write_it) {
    try {
      write_it();
      return true;
    } catch (const std::exception& e) {
      if (out.write_error.empty()) out.write_error = e.what();
      out.failed = true;
      return false;
    }
  };
  for (size_t i = 0; i < spec.arms.size(); ++i) {
    const ArmSpec& arm = spec.arms[i];
    if (kept(arm)) {
      out.summaries.push_back(read_json(dir / arm.name / "summary.json"));
      continue;
    }
    status["arms"][arm.name] = "running";
    if (!save([&] { write_json_atomically(dir / "run.json", status); })) break;
    ArmOutcome outcome = run_arm(exe, dir, spec, arm, static_cast<int>(i), train_size, resume, progress, coordinator);
    status["arms"][arm.name] = outcome.status;
    out.summaries.push_back(outcome.summary);
    out.failed = out.failed || outcome.status == "failed";
    if (outcome.status == "interrupted") {
      out.interrupted = true;
      break;
    }
  }
  // The arms an interruption kept from starting are in the table too, as not run.
  for (size_t i = out.summaries.size(); i < spec.arms.size(); ++i)
    out.summaries.push_back({{"arm", spec.arms[i].name}, {"regime", spec.arms[i].regime}, {"status", "not run"}});
  coordinator.coordinator().stop();
  coordinator.close_writers();
  // The pass's status is its worst arm's; a run that went badly never says finished.
  status["status"] = run_status(out.interrupted, out.failed, out.summaries);
  if (!out.write_error.empty()) status["error"] = out.write_error;
  save([&] { write_json_atomically(dir / "run.json", status); });
  save([&] { write_file_atomically(dir / "summary.md", analysis::summary_table(spec.name, out.summaries)); });
  if (!out.write_error.empty()) progress.error("", "cannot write the run's files: " + out.write_error);
  return out;
}

// Each arm's figures over its repeats that ran to their end, added to the first repeat's
// summary (RUN/<arm>/summary.json, "repeats") and to its entry in `summaries`.
void add_repeat_statistics(const fs::path& run_dir, const ExperimentSpec& spec, std::vector<json>& summaries) {
  for (json& first : summaries) {
    const std::string arm = first.value("arm", "");
    std::vector<json> ran;
    std::vector<uint64_t> seeds;
    std::vector<fs::path> weights;
    for (int k = 1; k <= spec.repeats; ++k) {
      const fs::path arm_dir = analysis::repeat_dir(run_dir, k) / arm;
      if (!fs::exists(arm_dir / "summary.json")) continue;
      json s = read_json(arm_dir / "summary.json");
      if (!ended(s.value("status", ""))) continue;
      ran.push_back(std::move(s));
      seeds.push_back(analysis::repeat_seed(spec.seed, k));
      weights.push_back(arm_dir / "final.safetensors");
    }
    if (ran.empty()) continue;  // cut short before its first repeat ended
    first["repeats"] = analysis::repeat_statistics(ran, seeds, analysis::identical_repeats(ran, weights));
    write_json_atomically(run_dir / arm / "summary.json", first);
  }
}

}  // namespace

void check_experiment(const ExperimentSpec& spec) { check_batches_fit(spec, workload_train_size(spec)); }

int run_experiment(const RunOptions& opt) {
  const std::shared_ptr<const transport::Tls> tls = load_tls(opt.tls);  // bad settings fail before the run folder
  std::unique_ptr<Progress> progress = make_progress(opt.progress);
  fs::path run_dir;
  ExperimentSpec spec;
  const bool resume = !opt.resume.empty();
  std::unique_ptr<RunFolderLock> lock;  // held until the run ends: a run folder has one writer
  if (resume) {
    run_dir = opt.resume;
    if (!fs::is_directory(run_dir)) throw InputError("--resume " + run_dir.string() + ": no such run folder");
    if (!fs::exists(run_dir / "spec.json"))
      throw InputError("--resume " + run_dir.string() + ": not a run folder (no spec.json; quartet run makes one)");
    lock = std::make_unique<RunFolderLock>(run_dir, "--resume");
    const json saved = read_json(run_dir / "spec.json");
    try {
      spec = parse_spec(saved.value("spec", json()));
    } catch (const SpecError& e) {
      throw InputError((run_dir / "spec.json").string() + ": " + e.what());
    }
  } else {
    spec = opt.spec ? *opt.spec : load_spec_file(opt.spec_path);
    run_dir = opt.out.empty() ? default_out(spec) : opt.out;
  }
  std::unique_ptr<workloads::Workload> wl = load_workload(spec);
  const int64_t train_size = wl->train_size();
  check_batches_fit(spec, train_size);
  // The first pass's coordinator listens before the folder is made: an address that
  // cannot be taken (--listen with a busy port, or not this host's) leaves nothing behind.
  std::unique_ptr<RunCoordinator> first_coordinator = pass_coordinator(run_dir, repeat_spec(spec, 1), resume, opt, tls);
  // Removes a folder this run made if set-up fails (a bad --init, a full disk) before the
  // first arm starts.
  std::optional<UnmadeRunFolder> unmade;
  if (!resume) {
    make_run_folder(run_dir, "--out");
    unmade.emplace(run_dir);
    lock = std::make_unique<RunFolderLock>(run_dir, "--out");
    write_json_atomically(run_dir / "spec.json", {{"spec", spec.json}, {"environment", environment()}});
    write_initial_weights(spec, *wl, opt.init, run_dir);
    write_json_atomically(run_dir / "run.json", {{"status", "running"}, {"arms", json::object()}});
    for (int k = 2; k <= spec.repeats; ++k) make_repeat_folder(run_dir, spec, k, *wl, opt.init);
  }
  // A resume of a run cut short while it made its repeats' folders makes the rest.
  for (int k = 2; k <= spec.repeats; ++k) make_repeat_folder(run_dir, spec, k, *wl, "");
  wl.reset();  // the roles load their own copy

  SignalGuard signals;
  g_signal = 0;
  int64_t planned = 0;  // the samples of every arm and repeat still to run
  for (int k = 1; k <= spec.repeats; ++k) {
    const fs::path dir = analysis::repeat_dir(run_dir, k);
    const json status = read_status(dir);
    for (const ArmSpec& arm : spec.arms)
      if (!kept_arm(status, dir, arm, resume)) planned += planned_samples(arm, train_size);
  }
  progress->run_started(run_dir.string(), static_cast<int>(spec.arms.size()), planned);
  std::vector<json> summaries;
  bool failed = false, interrupted = false;
  std::string write_error;  // a file the coordinator could not write: the run failed
  // Repeat after repeat, each over every arm: a machine that slows down over the run
  // slows every arm's repeats alike.
  for (int k = 1; k <= spec.repeats && !interrupted; ++k) {
    if (spec.repeats > 1 && opt.progress == "bar")
      std::cerr << "quartet: repeat " << k << " of " << spec.repeats << " (seed "
                << analysis::repeat_seed(spec.seed, k) << ")\n";
    PassOutcome pass = run_pass(analysis::repeat_dir(run_dir, k), repeat_spec(spec, k), resume, train_size, opt, tls,
                                *progress, std::move(first_coordinator), [&] {
                                  if (unmade) unmade->dismiss();
                                });
    if (k == 1) summaries = pass.summaries;
    failed = failed || pass.failed;
    interrupted = pass.interrupted;
    if (write_error.empty()) write_error = pass.write_error;
  }
  if (spec.repeats > 1) add_repeat_statistics(run_dir, spec, summaries);
  // The run's status is its worst arm's over every repeat.
  std::vector<json> everything = summaries;
  for (int k = 2; k <= spec.repeats; ++k)
    for (const ArmSpec& arm : spec.arms)
      if (const fs::path p = analysis::repeat_dir(run_dir, k) / arm.name / "summary.json"; fs::exists(p))
        everything.push_back(read_json(p));
  json status = read_status(run_dir);
  status["status"] = run_status(interrupted, failed, everything);
  std::string table = analysis::summary_table(spec.name, summaries);
  const std::vector<std::string> hints = training_hints(spec, summaries);
  if (!hints.empty()) {
    table += "\nHints:\n\n";
    for (const std::string& h : hints) table += "- " + h + "\n";
  }
  try {
    write_json_atomically(run_dir / "run.json", status);
    write_file_atomically(run_dir / "summary.md", table);
  } catch (const std::exception& e) {
    progress->error("", std::string("cannot write the run's files: ") + e.what());
    status["status"] = "failed";
  }
  if (!write_error.empty()) status["status"] = "failed";
  progress->run_finished({status["status"].get<std::string>(), spec.name, table, summaries, hints});
  if (interrupted) {
    std::cerr << "quartet: interrupted; finished arms are kept. Continue with: quartet run --resume "
              << run_dir.string() << "\n";
    return 130;
  }
  const std::string ran = status["status"].get<std::string>();
  return ran == "failed" ? 1 : ran == "finished" ? 0 : 3;  // 3: diverged or degraded
}

namespace {

// How long a role refused as a twin of a connected one keeps trying: a restarted role's
// old connection, from a host that went down, lasts until the coordinator's heartbeat
// timeout (15 s).
constexpr auto kTwinGrace = std::chrono::seconds(30);

// A remote role's connection, tried again until opt.join_within has passed: on a cluster
// the ranks start in any order, and a token file on a shared filesystem may lag.
std::unique_ptr<transport::CoordinatorClient> join_coordinator(transport::ClientOptions co, const RoleOptions& opt,
                                                               const std::string& address) {
  const auto give_up = std::chrono::steady_clock::now() + opt.join_within;
  const auto started = fs::file_time_type::clock::now();
  std::optional<std::chrono::steady_clock::time_point> twin_since;
  for (bool said = false;; said = true) {
    std::string why;
    if (!opt.token_file.empty()) {
      const TokenFile file = read_token_file(opt.token_file, started);
      if (!file.failure.empty())
        throw std::runtime_error("role " + opt.role + " stops: rank 0 failed (" + opt.token_file.string() +
                                 "): " + file.failure);
      co.token = file.token;
    }
    if (opt.token_file.empty() || !co.token.empty()) {
      try {
        return std::make_unique<transport::CoordinatorClient>(co);
      } catch (const transport::CoordinatorRefused& e) {
        why = e.what();
        // Another process runs this role: trying again cannot help once the coordinator
        // has had time to notice that an old connection of a restarted role is gone.
        if (e.twin()) {
          const auto now = std::chrono::steady_clock::now();
          if (!twin_since) twin_since = now;
          if (now - *twin_since >= kTwinGrace || opt.join_within.count() == 0)
            throw InputError("role " + opt.role + ": " + why + "; another process runs this role (a rank started "
                             "twice?): stop it, or give each process its own rank");
        }
      } catch (const std::runtime_error& e) {
        why = e.what();
      }
    } else {
      why = "no token in " + opt.token_file.string() + " yet";
    }
    if (std::chrono::steady_clock::now() >= give_up) {
      if (opt.join_within.count() == 0) throw std::runtime_error(why);
      throw std::runtime_error("role " + opt.role + " gave up joining the coordinator at " + address + " after " +
                               std::to_string(opt.join_within.count()) + " s: " + why);
    }
    if (!said)
      std::cerr << "quartet: role " << opt.role << " cannot join the coordinator at " << address << " yet (" << why
                << "); trying again for up to " << opt.join_within.count() << " s\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace

int run_role(const RoleOptions& opt) {
  if (const char* t = std::getenv("QUARTET_THREADS")) engine::set_compute_threads(std::max(1, std::atoi(t)));
  // Local roles learn the coordinator from the environment; remote ones from --coordinator.
  std::string address = opt.coordinator;
  if (address.empty())
    if (const char* c = std::getenv("QUARTET_COORDINATOR")) address = c;
  std::unique_ptr<transport::CoordinatorClient> client;
  if (!address.empty()) {
    transport::ClientOptions co;
    try {
      std::tie(co.host, co.port) = transport::parse_host_port(address);
    } catch (const std::invalid_argument& e) {
      throw InputError(std::string("--coordinator: ") + e.what());
    }
    co.arm = opt.arm;
    co.role = opt.role;
    co.tls = load_tls(opt.tls);
    client = join_coordinator(co, opt, address);
  }

  json spec_json;
  fs::path run_dir = opt.run_dir;
  const bool remote = !opt.coordinator.empty();
  if (remote) {
    const json settings = json::parse(client->settings_json(), nullptr, false);
    if (!settings.is_object() || !settings.contains("spec"))
      throw std::runtime_error("the coordinator at " + address + " has no arm named " + opt.arm);
    spec_json = settings["spec"];
    run_dir = opt.work_dir.empty() ? fs::path("quartet-role-" + opt.arm + "-" + opt.role) : opt.work_dir;
    fs::create_directories(run_dir / opt.arm / "roles");
  } else {
    spec_json = read_json(run_dir / "spec.json").at("spec");
  }
  const ExperimentSpec spec = parse_spec(spec_json, /*machine_limits=*/false);
  const ArmSpec& arm = spec.arm(opt.arm);
  std::unique_ptr<workloads::Workload> wl = load_workload(spec, arm);
  const fs::path init = initial_weights_path(run_dir, spec, arm);
  if (remote && !fs::exists(init))  // same seed, same weights as the run's
    engine::save_safetensors(init.string(), wl->make_model(arm.model, spec.seed)->state_dict());
  const trainers::Regime& regime = arm.regime_entry();
  trainers::RoleContext ctx = role_context(arm, run_dir, spec);
  ctx.role = opt.role;
  ctx.workload = wl.get();
  ctx.resume = opt.resume;
  if (const char* l = std::getenv("QUARTET_LOCAL_RANK")) ctx.local_rank = std::atoi(l);
  if (remote) ctx.on_record = [&client](const std::string& line) { client->send_record(line); };
  ctx.coordinator = client.get();
  const std::vector<std::string> roles = regime.roles(*arm.settings);
  const auto it = std::find(roles.begin(), roles.end(), opt.role);
  if (it == roles.end()) {
    std::string known;
    for (const auto& r : roles) known += (known.empty() ? "" : ", ") + r;
    throw InputError("--role " + opt.role + ": not a role of arm " + arm.name + " (" + arm.regime +
                     "); its roles are: " + known);
  }
  ctx.rank = static_cast<int>(it - roles.begin());  // a role's rank is its place in the regime's list
  try {
    regime.run_role(ctx);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    // A peer that went away fails this role in its own collective or connection, with an
    // error that names only an address; the coordinator knows which role vanished first.
    if (client && roles.size() > 1) {
      std::optional<std::string> gone;
      try {
        gone = client->kv_get(transport::vanished_key(arm.name), std::chrono::seconds(1));
      } catch (const std::exception&) {
      }
      if (gone && gone->rfind(opt.role + " ", 0) != 0)
        throw std::runtime_error(std::string(e.what()) + "; role " + *gone + " went away first");
    }
    throw;
  }
  if (client) client->leave();
  return 0;
}

}  // namespace quartet::runner

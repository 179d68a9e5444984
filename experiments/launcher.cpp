#include "experiments/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "engine/safetensors.h"
#include "engine/threads.h"
#include "experiments/environment.h"
#include "experiments/progress.h"
#include "experiments/results.h"
#include "experiments/wiring.h"
#include "trainers/regime.h"
#include "workloads/sampler.h"

extern char** environ;

namespace quartet::experiments {
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

fs::path self_exe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find the quartet executable (/proc/self/exe)");
  return p;
}

std::string random_token() {
  std::random_device rd("/dev/urandom");
  std::ostringstream out;
  for (int i = 0; i < 4; ++i) {
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
    out << buf;
  }
  return out.str();
}

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
    throw InputError(p.string() + ": not valid JSON: " + e.what());
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
};

pid_t spawn_role(const fs::path& exe, const fs::path& run_dir, const std::string& arm, const std::string& role,
                 bool resume, const fs::path& log, int threads, const std::string& token) {
  std::vector<std::string> args{"quartet", "role", "--run-dir", run_dir.string(), "--arm", arm, "--role", role};
  if (resume) args.push_back("--resume");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // The token travels in the environment, never in argv (ps shows argv to everyone).
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "QUARTET_THREADS=", 16) == 0 || std::strncmp(*e, "QUARTET_TOKEN=", 14) == 0) continue;
    env.emplace_back(*e);
  }
  env.push_back("QUARTET_THREADS=" + std::to_string(threads));
  env.push_back("QUARTET_TOKEN=" + token);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start role " + role + ": " + std::strerror(rc));
  return pid;
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

std::string last_error_line(const fs::path& log) {
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last.empty() ? "no message (see " + log.string() + ")" : last;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "unknown status";
}

struct ArmOutcome {
  std::string status;  // finished, failed, interrupted
  json summary;
};

ArmOutcome run_arm(const fs::path& exe, const fs::path& run_dir, const ExperimentSpec& spec, const ArmSpec& arm,
                   int index, int64_t train_size, bool resume, Progress& progress) {
  const fs::path arm_dir = run_dir / arm.name;
  fs::create_directories(arm_dir / "roles");
  const trainers::TrainConfig cfg = train_config(spec, arm);
  const std::vector<std::string> roles = trainers::make_regime(arm.regime)->roles(cfg);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = arm.threads > 0 ? arm.threads : std::max(1, cores / static_cast<int>(roles.size()));
  const std::string token = random_token();

  int64_t total = cfg.epochs * workloads::batches_per_epoch(train_size, cfg.batch) * cfg.batch;
  if (cfg.max_steps > 0) total = std::min(total, cfg.max_steps * cfg.batch);
  progress.arm_started(arm.name, index, total);

  std::vector<Child> children;
  for (const std::string& role : roles) {
    Child c;
    c.role = role;
    c.records = trainers::records_path(arm_dir, role);
    c.log = arm_dir / "roles" / (role + ".log");
    children.push_back(std::move(c));
  }
  for (Child& c : children) c.pid = spawn_role(exe, run_dir, arm.name, c.role, resume, c.log, threads, token);

  std::string failure;
  bool interrupted = false;
  auto drain = [&](Child& c) {
    for (const json& r : read_new_records(c)) progress.step(arm.name, r);
  };
  for (;;) {
    bool all_done = true;
    for (Child& c : children) {
      drain(c);
      if (c.done) continue;
      int status = 0;
      const pid_t r = waitpid(c.pid, &status, WNOHANG);
      if (r == c.pid) {
        c.done = true;
        c.status = status;
        drain(c);
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && failure.empty() && !g_signal)
          failure = "role " + c.role + " failed (" + describe_exit(status) + "): " + last_error_line(c.log);
      } else {
        all_done = false;
      }
    }
    if (all_done) break;
    if (g_signal && !interrupted) {
      interrupted = true;
      for (Child& c : children)
        if (!c.done) kill(c.pid, SIGTERM);
    }
    if (!failure.empty()) {  // one role gone: the others cannot finish the arm
      for (Child& c : children)
        if (!c.done) kill(c.pid, SIGTERM);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  interrupted = interrupted || g_signal;

  std::vector<std::vector<json>> records;
  for (const Child& c : children) {
    try {
      records.push_back(fs::exists(c.records) ? read_jsonl(c.records) : std::vector<json>{});
    } catch (const std::exception& e) {
      if (failure.empty()) failure = e.what();
      records.emplace_back();
    }
  }
  ArmOutcome out;
  out.status = interrupted ? "interrupted" : failure.empty() ? "finished" : "failed";
  out.summary = summarize_arm(arm.name, arm.regime, records, cfg.target, train_size);
  out.summary["status"] = out.status;
  out.summary["threads_per_process"] = threads;
  if (!failure.empty()) {
    out.summary["error"] = failure;
    progress.error(arm.name, failure);
  }
  write_json_atomically(arm_dir / "summary.json", out.summary);
  progress.arm_finished(arm.name, out.summary);
  return out;
}

fs::path default_out(const ExperimentSpec& spec) {
  const fs::path base = fs::path("results") / (spec.name + "-" + timestamp());
  fs::path p = base;
  for (int i = 2; fs::exists(p); ++i) p = base.string() + "-" + std::to_string(i);
  return p;
}

// The run's initial weights: from --init (checked against the model) or the seed.
void write_initial_weights(const ExperimentSpec& spec, const workloads::Workload& wl, const std::string& init,
                           const fs::path& dest) {
  std::shared_ptr<engine::Model> model = wl.make_model(spec.workload.model, spec.seed);
  if (!init.empty()) {
    try {
      engine::load_state_dict(*model, engine::read_safetensors(init).tensors);
    } catch (const std::exception& e) {
      throw InputError("--init " + init + ": " + e.what());
    }
  }
  engine::save_safetensors(dest.string(), model->state_dict(), {{"format", "pt"}});
}

}  // namespace

int run_experiment(const RunOptions& opt) {
  std::unique_ptr<Progress> progress = make_progress(opt.progress);
  fs::path run_dir;
  ExperimentSpec spec;
  json status;
  const bool resume = !opt.resume.empty();
  if (resume) {
    run_dir = opt.resume;
    if (!fs::is_directory(run_dir)) throw InputError("--resume " + run_dir.string() + ": no such run folder");
    const json saved = read_json(run_dir / "spec.json");
    try {
      spec = parse_spec(saved.at("spec"));
    } catch (const SpecError& e) {
      throw InputError((run_dir / "spec.json").string() + ": " + e.what());
    }
    status = fs::exists(run_dir / "run.json") ? read_json(run_dir / "run.json") : json::object();
  } else {
    spec = load_spec_file(opt.spec_path);
    run_dir = opt.out.empty() ? default_out(spec) : opt.out;
    if (fs::exists(run_dir))
      throw InputError("--out " + run_dir.string() + " exists; a run folder is never overwritten (choose another, or "
                       "--resume it)");
  }
  std::unique_ptr<workloads::Workload> wl = load_workload(spec);
  if (!resume) {
    fs::create_directories(run_dir);
    write_json_atomically(run_dir / "spec.json", {{"spec", spec.json}, {"environment", environment()}});
    write_initial_weights(spec, *wl, opt.init, run_dir / "init.safetensors");
    status = {{"status", "running"}, {"arms", json::object()}};
    write_json_atomically(run_dir / "run.json", status);
  }
  const int64_t train_size = wl->train_set().size();
  wl.reset();  // the roles load their own copy

  SignalGuard signals;
  g_signal = 0;
  const fs::path exe = self_exe();
  progress->run_started(run_dir.string(), static_cast<int>(spec.arms.size()));
  std::vector<json> summaries;
  bool failed = false, interrupted = false;
  for (size_t i = 0; i < spec.arms.size(); ++i) {
    const ArmSpec& arm = spec.arms[i];
    const fs::path summary_path = run_dir / arm.name / "summary.json";
    if (resume && status["arms"].value(arm.name, "") == "finished" && fs::exists(summary_path)) {
      summaries.push_back(read_json(summary_path));
      continue;
    }
    status["arms"][arm.name] = "running";
    write_json_atomically(run_dir / "run.json", status);
    ArmOutcome outcome = run_arm(exe, run_dir, spec, arm, static_cast<int>(i), train_size, resume, *progress);
    status["arms"][arm.name] = outcome.status;
    summaries.push_back(outcome.summary);
    failed = failed || outcome.status == "failed";
    if (outcome.status == "interrupted") {
      interrupted = true;
      break;
    }
  }
  status["status"] = interrupted ? "interrupted" : failed ? "failed" : "finished";
  write_json_atomically(run_dir / "run.json", status);
  const std::string table = summary_table(spec.name, summaries);
  write_file_atomically(run_dir / "summary.md", table);
  progress->run_finished(status["status"].get<std::string>(), table);
  if (interrupted) {
    std::cerr << "quartet: interrupted; finished arms are kept. Continue with: quartet run --resume "
              << run_dir.string() << "\n";
    return 130;
  }
  return failed ? 1 : 0;
}

int run_role(const fs::path& run_dir, const std::string& arm_name, const std::string& role, bool resume) {
  const json saved = read_json(run_dir / "spec.json");
  const ExperimentSpec spec = parse_spec(saved.at("spec"));
  const ArmSpec& arm = spec.arm(arm_name);
  if (const char* t = std::getenv("QUARTET_THREADS")) engine::set_compute_threads(std::max(1, std::atoi(t)));
  std::unique_ptr<workloads::Workload> wl = load_workload(spec);
  std::unique_ptr<trainers::Regime> regime = trainers::make_regime(arm.regime);
  trainers::RoleContext ctx;
  ctx.arm = arm.name;
  ctx.role = role;
  ctx.arm_dir = run_dir / arm.name;
  ctx.init_weights = run_dir / "init.safetensors";
  ctx.model_name = spec.workload.model;
  ctx.config = train_config(spec, arm);
  ctx.workload = wl.get();
  ctx.resume = resume;
  regime->run_role(ctx);
  return 0;
}

}  // namespace quartet::experiments

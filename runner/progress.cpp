#include "runner/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>

#include "analysis/summary.h"
#include "analysis/tables.h"

namespace quartet::runner {
namespace {

using nlohmann::json;

std::string clock_text(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "--:--";
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

// Progress on stderr: on a terminal one bar per arm, redrawn in place; elsewhere (stdout
// or stderr redirected to a log) a line when an arm starts, at each of its evaluations
// (an epoch's or a round's end) and when it ends. Both give the arm's ETA and the run's:
// the run's work is its arms' planned training samples, and the samples done so far
// measure it (arms of unequal speed make it approximate, as any bar over a whole job).
class Console : public Progress {
 public:
  Console() : tty_(::isatty(2)) {}
  void run_started(const std::string& run_dir, int arms, int64_t planned) override {
    arms_ = arms;
    planned_ = planned;
    run_start_ = std::chrono::steady_clock::now();
    std::fprintf(stderr, "quartet: %d arm%s, results in %s\n", arms, arms == 1 ? "" : "s", run_dir.c_str());
  }
  void arm_started(const std::string& arm, int index, int64_t total, const std::string& clock_role) override {
    arm_ = arm;
    index_ = index;
    total_ = total;
    clock_role_ = clock_role;
    samples_ = 0;
    loss_ = 0.0;
    last_quality_ = -1.0;
    start_ = std::chrono::steady_clock::now();
    if (!tty_) std::fprintf(stderr, "%s %s: started\n", tag().c_str(), arm.c_str());
    else draw();
  }
  void step(const std::string&, const json& r) override {
    if (!clock_role_.empty() && r.value("role", clock_role_) != clock_role_) return;
    samples_ = std::max(samples_, r.value("samples", int64_t{0}));
    if (r.contains("loss") && r["loss"].is_number()) loss_ = r["loss"].get<double>();
    const bool evaluated = r.contains("eval") && r["eval"].is_object() && r["eval"].contains("value");
    if (evaluated) {
      last_quality_ = r["eval"]["value"].get<double>();
      metric_ = r["eval"].value("metric", "quality");
    }
    if (tty_) return draw();
    if (!evaluated) return;
    // A log line per evaluation: what a person tailing the log wants at each epoch's end.
    std::string where = "epoch " + analysis::fixed(r.value("epoch", 0.0), 2);
    if (r.contains("round")) where = "round " + std::to_string(r.value("step", int64_t{0}));  // federated: a step a round
    std::fprintf(stderr, "%s %s: %s, %3.0f%%, loss %.4f, %s %.4f, %s elapsed, ETA %s, run ETA %s\n", tag().c_str(),
                 arm_.c_str(), where.c_str(), 100.0 * fraction(), loss_, metric_.c_str(), last_quality_,
                 clock_text(arm_elapsed()).c_str(), clock_text(arm_eta()).c_str(), clock_text(run_eta()).c_str());
  }
  void arm_finished(const std::string& arm, const json& s) override {
    const std::string status = s.value("status", "finished");
    if (status == "finished") samples_ = std::max(samples_, total_);  // the bar ends full
    if (tty_) {
      draw();
      std::fprintf(stderr, "\n");
    }
    // The arm's work is done: it moves from the arm's share to the run's, counted once.
    done_ += std::max(total_, samples_);
    total_ = samples_ = 0;
    std::fprintf(stderr, "%s %s: %s, %.0f samples/s", tag().c_str(), arm.c_str(), analysis::status_text(s).c_str(),
                 s.value("samples_per_second", 0.0));
    if (s.contains("final_quality") && !s["final_quality"].is_null())
      std::fprintf(stderr, ", %s %.4f", metric_.c_str(), s["final_quality"].get<double>());
    std::fprintf(stderr, ", %s; run ETA %s\n", clock_text(arm_elapsed()).c_str(), clock_text(run_eta()).c_str());
  }
  void error(const std::string& arm, const std::string& message) override {
    if (tty_) std::fprintf(stderr, "\n");
    std::fprintf(stderr, "quartet: %s%s%s\n", arm.c_str(), arm.empty() ? "" : ": ", message.c_str());
  }
  void run_finished(const std::string& status, const std::string& summary_md) override {
    std::fprintf(stdout, "%s", summary_md.c_str());
    std::fflush(stdout);
    if (status != "finished") std::fprintf(stderr, "quartet: run %s\n", status.c_str());
  }

 private:
  std::string tag() const {
    char buf[48];
    std::snprintf(buf, sizeof buf, "[%d/%d]", index_ + 1, arms_);
    return buf;
  }
  double fraction() const {
    return total_ > 0 ? std::min(1.0, static_cast<double>(samples_) / static_cast<double>(total_)) : 0.0;
  }
  double arm_elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  double arm_eta() const {
    const double f = fraction();
    return f > 0 ? arm_elapsed() * (1.0 - f) / f : -1.0;
  }
  // The whole run's: its elapsed time scaled by the planned samples still to train.
  double run_eta() const {
    const double done = static_cast<double>(done_ + std::min(samples_, total_ > 0 ? total_ : samples_));
    if (!(done > 0) || planned_ <= 0) return -1.0;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
    return elapsed * std::max(0.0, static_cast<double>(planned_) - done) / done;
  }
  void draw() {
    constexpr int kWidth = 24;
    const double frac = fraction();
    std::string bar;
    const int filled = static_cast<int>(frac * kWidth);
    for (int i = 0; i < kWidth; ++i) bar += i < filled ? "#" : "-";
    const std::string quality = last_quality_ >= 0 ? " " + metric_ + " " + analysis::fixed(last_quality_, 4) : "";
    std::fprintf(stderr, "\r%s %-14s [%s] %3.0f%%  loss %.4f%s  %s elapsed, ETA %s, run ETA %s   ", tag().c_str(),
                 arm_.c_str(), bar.c_str(), frac * 100.0, loss_, quality.c_str(), clock_text(arm_elapsed()).c_str(),
                 clock_text(arm_eta()).c_str(), clock_text(run_eta()).c_str());
    std::fflush(stderr);
  }

  bool tty_;
  int arms_ = 0, index_ = 0;
  int64_t planned_ = 0, done_ = 0, total_ = 0, samples_ = 0;
  std::string arm_, clock_role_, metric_ = "quality";
  double loss_ = 0.0, last_quality_ = -1.0;
  std::chrono::steady_clock::time_point start_, run_start_;
};

// One JSON object per line on stdout: the event stream of docs/results.md.
class Jsonl : public Progress {
 public:
  void run_started(const std::string& run_dir, int arms, int64_t planned) override {
    emit({{"event", "run_started"}, {"run_dir", run_dir}, {"arms", arms}, {"planned_samples", planned}});
  }
  void arm_started(const std::string& arm, int index, int64_t total, const std::string& clock_role) override {
    emit({{"event", "arm_started"}, {"arm", arm}, {"index", index}, {"total_samples", total}, {"clock_role", clock_role}});
  }
  void step(const std::string& arm, const json& r) override {
    emit({{"event", "step"}, {"arm", arm}, {"record", r}});
    if (r.contains("eval")) emit({{"event", "evaluation"}, {"arm", arm}, {"step", r["step"]}, {"eval", r["eval"]}});
  }
  void arm_finished(const std::string& arm, const json& s) override {
    emit({{"event", "arm_finished"}, {"arm", arm}, {"summary", s}});
  }
  void error(const std::string& arm, const std::string& message) override {
    emit({{"event", "error"}, {"arm", arm}, {"message", message}});
  }
  void run_finished(const std::string& status, const std::string&) override {
    emit({{"event", "run_finished"}, {"status", status}});
  }

 private:
  static void emit(const json& j) {
    std::cout << j.dump() << '\n';
    std::cout.flush();
  }
};

// Nothing while it runs; the summary table at the end, as the other modes print it.
class Silent : public Progress {
 public:
  void run_started(const std::string&, int, int64_t) override {}
  void arm_started(const std::string&, int, int64_t, const std::string&) override {}
  void step(const std::string&, const json&) override {}
  void arm_finished(const std::string&, const json&) override {}
  void error(const std::string& arm, const std::string& message) override {
    std::fprintf(stderr, "quartet: %s%s%s\n", arm.c_str(), arm.empty() ? "" : ": ", message.c_str());
  }
  void run_finished(const std::string&, const std::string& summary_md) override {
    std::fprintf(stdout, "%s", summary_md.c_str());
    std::fflush(stdout);
  }
};

}  // namespace

std::unique_ptr<Progress> make_progress(const std::string& mode) {
  if (mode == "bar") return std::make_unique<Console>();
  if (mode == "jsonl") return std::make_unique<Jsonl>();
  if (mode == "none") return std::make_unique<Silent>();
  throw std::invalid_argument("--progress: expected bar, jsonl or none, got \"" + mode + "\"");
}

}  // namespace quartet::runner

#include "experiments/progress.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>

namespace quartet::experiments {
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

// A one-line bar per arm on stderr, redrawn in place on a terminal; elsewhere only the
// arm's start and end lines.
class Bar : public Progress {
 public:
  Bar() : tty_(::isatty(2)) {}
  void run_started(const std::string& run_dir, int arms) override {
    arms_ = arms;
    std::fprintf(stderr, "quartet: %d arm%s, results in %s\n", arms, arms == 1 ? "" : "s", run_dir.c_str());
  }
  void arm_started(const std::string& arm, int index, int64_t total) override {
    arm_ = arm;
    index_ = index;
    total_ = total;
    start_ = std::chrono::steady_clock::now();
    if (!tty_) std::fprintf(stderr, "[%d/%d] %s: started\n", index + 1, arms_, arm.c_str());
    else draw(0, 0.0, -1.0);
  }
  void step(const std::string&, const json& r) override {
    if (!tty_) return;
    const double acc = r.contains("eval") ? r["eval"]["value"].get<double>() : -1.0;
    if (acc >= 0) last_quality_ = acc;
    draw(r.value("samples", int64_t{0}), r.value("loss", 0.0), last_quality_);
  }
  void arm_finished(const std::string& arm, const json& s) override {
    if (tty_) std::fprintf(stderr, "\n");
    std::fprintf(stderr, "[%d/%d] %s: %s, %.0f samples/s", index_ + 1, arms_, arm.c_str(),
                 s.value("status", "finished").c_str(), s.value("samples_per_second", 0.0));
    if (s.contains("final_quality") && !s["final_quality"].is_null())
      std::fprintf(stderr, ", quality %.4f", s["final_quality"].get<double>());
    std::fprintf(stderr, "\n");
    last_quality_ = -1.0;
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
  void draw(int64_t samples, double loss, double quality) {
    const double frac = total_ > 0 ? std::min(1.0, static_cast<double>(samples) / static_cast<double>(total_)) : 0.0;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double eta = frac > 0 ? elapsed * (1.0 - frac) / frac : -1.0;
    constexpr int kWidth = 24;
    std::string bar;
    const int filled = static_cast<int>(frac * kWidth);
    for (int i = 0; i < kWidth; ++i) bar += i < filled ? "#" : "-";
    std::fprintf(stderr, "\r[%d/%d] %-14s [%s] %3.0f%%  loss %.4f%s  %s elapsed, ETA %s   ", index_ + 1, arms_,
                 arm_.c_str(), bar.c_str(), frac * 100.0, loss,
                 quality >= 0 ? (" quality " + std::to_string(quality).substr(0, 6)).c_str() : "",
                 clock_text(elapsed).c_str(), clock_text(eta).c_str());
    std::fflush(stderr);
  }

  bool tty_;
  int arms_ = 0, index_ = 0;
  int64_t total_ = 0;
  std::string arm_;
  double last_quality_ = -1.0;
  std::chrono::steady_clock::time_point start_;
};

// One JSON object per line on stdout: the event stream of docs/results.md.
class Jsonl : public Progress {
 public:
  void run_started(const std::string& run_dir, int arms) override {
    emit({{"event", "run_started"}, {"run_dir", run_dir}, {"arms", arms}});
  }
  void arm_started(const std::string& arm, int index, int64_t total) override {
    emit({{"event", "arm_started"}, {"arm", arm}, {"index", index}, {"total_samples", total}});
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

class Silent : public Progress {
 public:
  void run_started(const std::string&, int) override {}
  void arm_started(const std::string&, int, int64_t) override {}
  void step(const std::string&, const json&) override {}
  void arm_finished(const std::string&, const json&) override {}
  void error(const std::string& arm, const std::string& message) override {
    std::fprintf(stderr, "quartet: %s%s%s\n", arm.c_str(), arm.empty() ? "" : ": ", message.c_str());
  }
  void run_finished(const std::string&, const std::string&) override {}
};

}  // namespace

std::unique_ptr<Progress> make_progress(const std::string& mode) {
  if (mode == "bar") return std::make_unique<Bar>();
  if (mode == "jsonl") return std::make_unique<Jsonl>();
  if (mode == "none") return std::make_unique<Silent>();
  throw std::invalid_argument("--progress: expected bar, jsonl or none, got \"" + mode + "\"");
}

}  // namespace quartet::experiments

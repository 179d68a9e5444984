#include "runner/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <stdexcept>

#include "analysis/summary.h"
#include "analysis/tables.h"
#include "runner/process.h"

namespace quartet::runner {
namespace {

namespace fs = std::filesystem;
using analysis::display_width;
using nlohmann::json;

std::string clock_text(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "--:--";
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

// How a person at this shell starts this very binary: "quartet" when it is the one on
// PATH, else its path relative to the working folder ("build/quartet") when it is under
// it, else its absolute path.
std::string invocation(const fs::path& exe) {
  std::error_code ec;
  if (const char* path = std::getenv("PATH"))
    for (std::string dirs = path; !dirs.empty();) {
      const size_t colon = dirs.find(':');
      const fs::path candidate = fs::path(dirs.substr(0, colon)) / exe.filename();
      if (fs::equivalent(candidate, exe, ec)) return exe.filename().string();
      dirs = colon == std::string::npos ? "" : dirs.substr(colon + 1);
    }
  const fs::path rel = fs::relative(exe, fs::current_path(ec), ec);
  if (!ec && !rel.empty() && *rel.begin() != "..") return rel.string();
  return exe.string();
}

// Progress on stderr: on a terminal one bar per arm, redrawn in place; elsewhere (stdout
// or stderr redirected to a log) a line when an arm starts, at each of its evaluations,
// every log_every_s while it trains and when it ends. Both give the arm's ETA and the
// run's: the run's work is its arms' planned training samples, and the samples done so
// far measure it (arms of unequal speed make it approximate, as any bar over a whole job).
class Console : public Progress {
 public:
  explicit Console(ConsoleOptions o) : o_(std::move(o)) {
    if (!o_.clock)
      o_.clock = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  }
  void run_started(const std::string& run_dir, int arms, int64_t planned) override {
    arms_ = arms;
    planned_ = planned;
    run_dir_ = run_dir;
    run_start_ = o_.clock();
    std::fprintf(o_.err, "quartet: %d arm%s, results in %s\n", arms, arms == 1 ? "" : "s", run_dir.c_str());
  }
  void arm_started(const std::string& arm, int index, int64_t total, const std::string& clock_role) override {
    arm_ = arm;
    index_ = index;
    total_ = total;
    clock_role_ = clock_role;
    samples_ = 0;
    loss_.reset();
    quality_.reset();
    start_ = last_line_ = o_.clock();
    if (!o_.err_terminal) std::fprintf(o_.err, "%s %s: started\n", tag().c_str(), arm.c_str());
    else draw();
  }
  void step(const std::string&, const json& r) override {
    if (!clock_role_.empty() && r.value("role", clock_role_) != clock_role_) return;
    samples_ = std::max(samples_, r.value("samples", int64_t{0}));
    if (r.contains("loss") && r["loss"].is_number()) loss_ = r["loss"].get<double>();
    const bool evaluated = r.contains("eval") && r["eval"].is_object() && r["eval"].contains("value");
    if (evaluated) {
      quality_ = r["eval"]["value"].get<double>();
      metric_ = r["eval"].value("metric", "quality");
    }
    if (o_.err_terminal) return draw();
    // A log line per evaluation, and while none comes, one every log_every_s: a person
    // tailing the log sees the arm move.
    if (!evaluated && o_.clock() - last_line_ < o_.log_every_s) return;
    last_line_ = o_.clock();
    std::string where = "epoch " + analysis::fixed(r.value("epoch", 0.0), 2);
    if (r.contains("round")) where = "round " + std::to_string(r.value("step", int64_t{0}));  // federated: a step a round
    std::string line = tag() + " " + arm_ + ": " + where + ", " + analysis::fixed(100.0 * fraction(), 0) + "%";
    if (loss_) line += ", loss " + analysis::fixed(*loss_, 4);
    if (quality_) line += ", " + metric_ + " " + analysis::fixed(*quality_, 4);
    line += ", " + clock_text(arm_elapsed()) + " elapsed, ETA " + clock_text(arm_eta()) + ", run ETA " +
            clock_text(run_eta());
    std::fprintf(o_.err, "%s\n", line.c_str());
  }
  void arm_finished(const std::string& arm, const json& s) override {
    const std::string status = s.value("status", "finished");
    if (status == "finished") samples_ = std::max(samples_, total_);  // the bar ends full
    if (o_.err_terminal) {
      draw();
      std::fprintf(o_.err, "\n");
    }
    // The arm's work is done: it moves from the arm's share to the run's, counted once.
    done_ += std::max(total_, samples_);
    total_ = samples_ = 0;
    std::string line = tag() + " " + arm + ": " + analysis::status_text(s) + ", " + analysis::fixed(s.value("samples_per_second", 0.0), 0) +
                       " samples/s";
    if (s.contains("final_quality") && s["final_quality"].is_number())
      line += ", " + metric_ + " " + analysis::fixed(s["final_quality"].get<double>(), 4);
    line += ", " + clock_text(arm_elapsed()) + "; run ETA " + clock_text(run_eta());
    std::fprintf(o_.err, "%s\n", line.c_str());
  }
  void error(const std::string& arm, const std::string& message) override {
    if (o_.err_terminal) std::fprintf(o_.err, "\r\x1b[K");
    std::fprintf(o_.err, "quartet: %s%s%s\n", arm.c_str(), arm.empty() ? "" : ": ", message.c_str());
    if (o_.err_terminal && !arm_.empty() && total_ > 0) draw();
  }
  void run_finished(const RunEnd& end) override {
    if (o_.out_terminal) {
      // The whole table stays in summary.md; a terminal gets what fits its width.
      std::string text = analysis::summary_text(end.run_name, end.arms, columns());
      if (!end.hints.empty()) {
        text += "\nHints:\n";
        for (const std::string& h : end.hints) text += "- " + h + "\n";
      }
      std::fprintf(o_.out, "%s", text.c_str());
    } else {
      std::fprintf(o_.out, "%s", end.summary_md.c_str());
    }
    std::fflush(o_.out);
    if (end.status != "finished") std::fprintf(o_.err, "quartet: run %s\n", end.status.c_str());
    // Where it all is, and what to do with it next.
    const std::string q = quoted(run_dir_);
    std::fprintf(o_.err, "\nResults: %s (summary.md: the whole table)\n", run_dir_.c_str());
    std::fprintf(o_.err, "  %s report %s   # charts, tables, link projection (report/index.html)\n",
                 o_.runner.c_str(), q.c_str());
    if (!o_.gui.empty()) std::fprintf(o_.err, "  %s %s   # the app: explore and compare\n", o_.gui.c_str(), q.c_str());
    std::fflush(o_.err);
  }

 private:
  // A path as a shell takes it: in single quotes when it holds anything but plain characters.
  static std::string quoted(const std::string& path) {
    if (path.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./+:@=,") ==
        std::string::npos)
      return path;
    std::string out = "'";
    for (char c : path) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  }
  int columns() const { return o_.columns > 0 ? o_.columns : terminal_columns(::fileno(o_.err)); }
  std::string tag() const {
    char buf[48];
    std::snprintf(buf, sizeof buf, "[%d/%d]", index_ + 1, arms_);
    return buf;
  }
  double fraction() const {
    return total_ > 0 ? std::min(1.0, static_cast<double>(samples_) / static_cast<double>(total_)) : 0.0;
  }
  double arm_elapsed() const { return o_.clock() - start_; }
  double arm_eta() const {
    const double f = fraction();
    return f > 0 ? arm_elapsed() * (1.0 - f) / f : -1.0;
  }
  // The whole run's: its elapsed time scaled by the planned samples still to train.
  double run_eta() const {
    const double done = static_cast<double>(done_ + std::min(samples_, total_ > 0 ? total_ : samples_));
    if (!(done > 0) || planned_ <= 0) return -1.0;
    const double elapsed = o_.clock() - run_start_;
    return elapsed * std::max(0.0, static_cast<double>(planned_) - done) / done;
  }
  void draw() {
    const BarFields f{tag(), arm_, fraction(), loss_, metric_, quality_, arm_elapsed(), arm_eta(), run_eta()};
    // Back to the line's start, the line, and the rest of the old one cleared.
    std::fprintf(o_.err, "\r%s\x1b[K", bar_line(f, columns()).c_str());
    std::fflush(o_.err);
  }

  ConsoleOptions o_;
  int arms_ = 0, index_ = 0;
  int64_t planned_ = 0, done_ = 0, total_ = 0, samples_ = 0;
  std::string arm_, clock_role_, run_dir_, metric_ = "quality";
  std::optional<double> loss_, quality_;
  double start_ = 0.0, run_start_ = 0.0, last_line_ = 0.0;
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
  void run_finished(const RunEnd& end) override { emit({{"event", "run_finished"}, {"status", end.status}}); }

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
  void run_finished(const RunEnd& end) override {
    std::fprintf(stdout, "%s", end.summary_md.c_str());
    std::fflush(stdout);
  }
};

}  // namespace

int terminal_columns(int fd) {
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* env = std::getenv("COLUMNS"))
    if (const int c = std::atoi(env); c > 0) return c;
  return 80;
}

std::string bar_line(const BarFields& f, int columns) {
  const int room = std::max(columns - 1, 1);
  // What may be given up, in the order it is: each step leaves out one more.
  bool run_eta = true, elapsed = true, quality = f.quality.has_value(), loss = f.loss.has_value(), bar = true;
  int bar_width = 24;
  std::string arm = f.arm;
  auto compose = [&] {
    std::string line = f.tag + " " + arm;
    if (bar) {
      const int filled = static_cast<int>(std::clamp(f.fraction, 0.0, 1.0) * bar_width);
      line.append(" [").append(static_cast<size_t>(filled), '#').append(static_cast<size_t>(bar_width - filled), '-');
      line.append("]");
    }
    char pct[16];
    std::snprintf(pct, sizeof pct, " %3.0f%%", std::clamp(f.fraction, 0.0, 1.0) * 100.0);
    line += pct;
    if (loss) line += "  loss " + analysis::fixed(*f.loss, 4);
    if (quality) line += "  " + f.metric + " " + analysis::fixed(*f.quality, 4);
    line += "  ";
    if (elapsed) line += clock_text(f.elapsed) + " elapsed, ";
    line += "ETA " + clock_text(f.eta);
    if (run_eta) line += ", run " + clock_text(f.run_eta);
    return line;
  };
  const std::function<void()> give_up[] = {
      [&] { run_eta = false; },
      [&] { elapsed = false; },
      [&] { bar_width = 10; },
      [&] { quality = false; },
      [&] { loss = false; },
      [&] { arm = analysis::cut_to_width(f.arm, 10); },
      [&] { bar = false; },
  };
  std::string line = compose();
  for (const auto& next : give_up) {
    if (display_width(line) <= room) return line;
    next();
    line = compose();
  }
  return analysis::cut_to_width(line, room);
}

std::unique_ptr<Progress> make_console(ConsoleOptions options) { return std::make_unique<Console>(std::move(options)); }

std::unique_ptr<Progress> make_progress(const std::string& mode) {
  if (mode == "bar") {
    ConsoleOptions o;
    o.err_terminal = ::isatty(2);
    o.out_terminal = ::isatty(1);
    const fs::path exe = self_executable();
    o.runner = invocation(exe);
    std::error_code ec;
    if (fs::exists(exe.parent_path() / "quartet-gui", ec)) o.gui = invocation(exe.parent_path() / "quartet-gui");
    return make_console(std::move(o));
  }
  if (mode == "jsonl") return std::make_unique<Jsonl>();
  if (mode == "none") return std::make_unique<Silent>();
  throw std::invalid_argument("--progress: expected bar, jsonl or none, got \"" + mode + "\"");
}

}  // namespace quartet::runner

#pragma once

// What `quartet run` shows while it works: on a terminal a bar with the arm's and the
// run's ETA, fitted to the terminal's width; elsewhere (a log file, a batch job) a line at
// a start, at each evaluation, at least every 30 s while an arm trains, and at an end,
// with the same ETAs; a JSON-lines event stream for the GUI and scripts (docs/results.md);
// or nothing but the summary table.

#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace quartet::runner {

// How a run ended, as its closing output tells it.
struct RunEnd {
  std::string status;       // finished, failed, interrupted, …
  std::string run_name;
  std::string summary_md;   // RUN/summary.md, as written
  std::vector<nlohmann::json> arms;  // every arm's summary, in the spec's order ("not run" for those never started)
  std::vector<std::string> hints;
};

class Progress {
 public:
  virtual ~Progress() = default;
  // `planned_samples`: the training samples of every arm (and repeat) still to run, the
  // run-wide ETA's measure of work.
  virtual void run_started(const std::string& run_dir, int arms, int64_t planned_samples) = 0;
  // `clock_role`: the role whose records carry the arm's samples and evaluations
  // (trainers::clock_role_name); the others' records do not move the arm's progress.
  virtual void arm_started(const std::string& arm, int index, int64_t total_samples,
                           const std::string& clock_role) = 0;
  virtual void step(const std::string& arm, const nlohmann::json& record) = 0;
  virtual void arm_finished(const std::string& arm, const nlohmann::json& summary) = 0;
  virtual void error(const std::string& arm, const std::string& message) = 0;
  virtual void run_finished(const RunEnd& end) = 0;
};

// mode: "bar", "jsonl" or "none"; throws std::invalid_argument otherwise.
std::unique_ptr<Progress> make_progress(const std::string& mode);

// The console ("bar") mode's settings; make_progress("bar") takes them from the process
// (isatty, the terminal's width, the steady clock, how the runner was started).
struct ConsoleOptions {
  std::FILE* out = stdout;         // the closing table
  std::FILE* err = stderr;         // the bar, the log lines, the closing hints
  bool err_terminal = false;       // a bar redrawn in place, not log lines
  bool out_terminal = false;       // a table fitted to the width, not Markdown
  int columns = 0;                 // the terminal's width; 0: asked of it at each redraw
  double log_every_s = 30.0;       // log lines: at least this often while an arm trains
  std::function<double()> clock;   // seconds on a monotonic clock; empty: steady_clock
  std::string runner = "quartet";  // how a person starts the runner ("build/quartet")
  std::string gui;                 // and the app beside it; empty when it is not built
};
std::unique_ptr<Progress> make_console(ConsoleOptions options);

// One redraw of the bar: what it shows.
struct BarFields {
  std::string tag;  // "[2/5]"
  std::string arm;
  double fraction = 0.0;
  std::optional<double> loss;  // none before the arm's first step
  std::string metric;
  std::optional<double> quality;
  double elapsed = 0.0, eta = -1.0, run_eta = -1.0;  // seconds; < 0: unknown
};

// The bar's line in at most `columns - 1` characters (a line as wide as the terminal
// wraps on some), its fields given up in a fixed order until it fits: the run's ETA, the
// elapsed time, the bar narrowed from 24 to 10, the quality, the loss, the arm's name cut
// to 10, the bar itself.
std::string bar_line(const BarFields& fields, int columns);

// The terminal's width in columns (TIOCGWINSZ on `fd`, else $COLUMNS, else 80).
int terminal_columns(int fd);

}  // namespace quartet::runner

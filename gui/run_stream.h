#pragma once

// A live run as results: the event stream of `quartet run --progress=jsonl`
// (docs/results.md) folded into the same RunResults a finished run folder loads into.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/results_model.h"

namespace quartet::gui {

class RunStream {
 public:
  // `spec` (the experiment being run) names the arms before their first event.
  explicit RunStream(const nlohmann::json& spec = nullptr);

  // One line of the stream. A line that is not a JSON event is kept as log text, never
  // an error: a crashing runner may write anything.
  void feed(const std::string& line);

  // A resumed run's history: each arm of `saved` (its folder as the resume found it) that
  // ran to its end is taken with its records and summary, as the resume keeps it and sends
  // no events for it; the others wait for theirs.
  void keep_ended(const analysis::RunResults& saved);

  const analysis::RunResults& snapshot() const { return run_; }
  const std::vector<std::string>& errors() const { return errors_; }  // "arm: message"
  const std::vector<std::string>& log() const { return log_; }
  bool finished() const { return finished_; }
  // Grows with every change: a view refreshes when it differs from the one it drew.
  uint64_t version() const { return version_; }

 private:
  analysis::ArmResults& arm(const std::string& name);

  analysis::RunResults run_;
  std::vector<std::string> errors_;
  std::vector<std::string> log_;
  bool finished_ = false;
  uint64_t version_ = 0;
};

// A run whose runner has ended, as its exit code tells it when the stream did not (130:
// stopped, as Ctrl-C; another non-zero code: failed): the run and an arm still running
// take that status; an arm never started is "not run" unless the run finished.
void settle(analysis::RunResults& run, int exit_code);

// How far an arm is, 0…1: samples done over the planned total (1 once finished).
double arm_progress(const analysis::ArmResults& arm);

}  // namespace quartet::gui

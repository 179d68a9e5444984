#pragma once

// What `quartet run` shows while it works: on a terminal a bar with the arm's and the
// run's ETA; elsewhere (a log file, a batch job) a line a start, an evaluation (each
// epoch's or round's end) and an end, with the same ETAs; a JSON-lines event stream for
// the GUI and scripts (docs/results.md); or nothing but the summary table.

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace quartet::runner {

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
  virtual void run_finished(const std::string& status, const std::string& summary_md) = 0;
};

// mode: "bar", "jsonl" or "none"; throws std::invalid_argument otherwise.
std::unique_ptr<Progress> make_progress(const std::string& mode);

}  // namespace quartet::runner

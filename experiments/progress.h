#pragma once

// What `quartet run` shows while it works: a bar with ETA on a terminal, a JSON-lines
// event stream for the GUI and scripts (docs/results.md), or nothing.

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace quartet::experiments {

class Progress {
 public:
  virtual ~Progress() = default;
  virtual void run_started(const std::string& run_dir, int arms) = 0;
  virtual void arm_started(const std::string& arm, int index, int64_t total_samples) = 0;
  virtual void step(const std::string& arm, const nlohmann::json& record) = 0;
  virtual void arm_finished(const std::string& arm, const nlohmann::json& summary) = 0;
  virtual void error(const std::string& arm, const std::string& message) = 0;
  virtual void run_finished(const std::string& status, const std::string& summary_md) = 0;
};

// mode: "bar", "jsonl" or "none"; throws std::invalid_argument otherwise.
std::unique_ptr<Progress> make_progress(const std::string& mode);

}  // namespace quartet::experiments

#pragma once

#include <filesystem>
#include <string>

namespace quartet::experiments {

struct RunOptions {
  std::string spec_path;              // the experiment file (not with resume)
  std::filesystem::path out;          // empty: results/<name>-<time>; must not exist
  std::string init;                   // initial weights (safetensors); empty: from the seed
  std::filesystem::path resume;       // continue this run folder
  std::string progress = "bar";       // bar, jsonl or none
};

// `quartet run`: makes the run folder, runs the arms one after another, each as its
// roles' processes, follows their records, and writes each arm's summary and the run's
// summary.md. Returns the exit code: 0 done, 1 an arm failed, 2 bad input (the message
// printed), 130 interrupted (finished arms' results kept, the run marked interrupted).
int run_experiment(const RunOptions& options);

// `quartet role`: one role of one arm, inside a run folder made by run_experiment.
int run_role(const std::filesystem::path& run_dir, const std::string& arm, const std::string& role, bool resume);

}  // namespace quartet::experiments

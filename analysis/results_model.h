#pragma once

// A run folder (docs/results.md) read into memory for the report, the projection and the
// charts: the spec as run, each arm's summary and its roles' records. The GUI builds the
// same structures live from `quartet run --progress=jsonl` events (gui/run_stream.h), so a
// chart cannot tell a finished run from a running one.

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainers/records.h"

namespace quartet::analysis {

// A run folder that cannot be read: the message names the file and what is wrong.
class ResultsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EvalPoint {
  int64_t step = 0;
  int64_t samples = 0;
  double epoch = 0.0;
  double wall = 0.0;   // seconds since the arm started
  double value = 0.0;  // the workload's metric
};

struct BytesPoint {
  double wall = 0.0;
  double bytes = 0.0;  // cumulative, every message counted once (at its sender)
};

// Tracked peak bytes per tag of one kind of process (a role's name without its index),
// the largest process of that kind.
struct ProcessMemory {
  std::string kind;                                  // "" for a one-process arm
  // parameters, gradients, … in record order: each tag's bytes when the process's tracked
  // total peaked (they sum to that peak), or, from records without that breakdown, each
  // tag's own peak (reached at different moments: they may sum to more)
  std::vector<std::pair<std::string, double>> tags;
  double rss = 0.0;
  bool gpu = false;      // the tags are the GPU's (the process trained on one), not host memory
  bool at_peak = false;  // tags are the breakdown at the total's peak
};

struct ArmResults {
  std::string name;
  std::string label;   // what charts call it: the name, or "run / name" in a comparison
  int run = 0;         // which run of a comparison it comes from (0: the first); charts
                       // colour arms by name and draw each run in its own style
  std::string regime;
  std::string status;  // pending, running, finished, failed, interrupted (run.json or events)
  std::string link = "loopback";  // the emulated link its Asio traffic crossed
  std::string error;              // why it failed, when it did
  nlohmann::json spec;            // the arm as run (defaults filled), or null
  nlohmann::json summary;         // <arm>/summary.json, or null while it runs
  std::vector<trainers::RoleRecords> roles;
  int64_t total_samples = 0;      // planned training samples, when known (events)
  // The evaluations of the arm's repeats 2..N that ran to their end (RUN/repeats/<k>/),
  // in repeat order; empty for a run without repeats (docs/results.md).
  std::vector<std::vector<EvalPoint>> repeat_evaluations;

  // Adds one record to its role (a live run's step event).
  void add_record(const nlohmann::json& record);
  const trainers::RoleRecords* role(const std::string& name) const;
  // The role whose step records carry the arm's clock and evaluations (trainers::clock_role);
  // null before the first record.
  const trainers::RoleRecords* timeline() const;
};

struct RunResults {
  std::filesystem::path dir;
  std::string name;
  std::string status;        // run.json's, or "unknown" when it has none
  nlohmann::json spec;       // spec.json's "spec"
  nlohmann::json environment;
  std::vector<ArmResults> arms;  // in the spec's order
  std::vector<std::string> warnings;  // readable problems that did not stop the load
};

// Reads a run folder. Throws ResultsError naming the file for a folder that is not a run
// (no spec.json), unreadable or malformed JSON, a corrupt record line, or fields of the
// wrong type. A torn last record line (a killed writer) is not an error; an arm without a
// summary yet is loaded from its records.
// A run with repeats also gives each arm its other repeats' evaluations; a repeat folder
// that cannot be read is a warning.
RunResults load_run(const std::filesystem::path& dir);

// Figures derived from an arm's records and summary, for charts; each tolerates a running
// arm (no summary) and missing fields (returns empty or 0).
std::vector<EvalPoint> eval_points(const ArmResults& arm);
// The metric the arm was evaluated with ("accuracy", "dice", "bpc"), from its first
// evaluation record or its summary; empty before any evaluation.
std::string eval_metric(const ArmResults& arm);

// The training loss at each step of the arm's clock role, against the training samples so
// far: (samples, loss), non-finite losses left out; an arm of ranks that each train a
// slice of the batch (data_parallel) gives the mean of its ranks' losses, the batch's.
std::vector<std::pair<int64_t, double>> loss_points(const ArmResults& arm);
std::vector<BytesPoint> cumulative_bytes(const ArmResults& arm);
double samples_per_second(const ArmResults& arm);  // training samples per training second
double bytes_per_process_per_epoch(const ArmResults& arm);
double epochs_done(const ArmResults& arm);
int64_t samples_done(const ArmResults& arm);
double train_seconds(const ArmResults& arm);  // wall minus evaluation
double wall_seconds(const ArmResults& arm);   // since the arm started, evaluation included
std::vector<ProcessMemory> process_memory(const ArmResults& arm);
std::vector<std::string> memory_tags();  // parameters, gradients, … in a fixed order

// Whether the arm stopped before its end (interrupted, or failed): its figures cover
// only the part it ran.
bool is_partial(const ArmResults& arm);
// What charts and tables call the arm: its label (or name), "(partial)" after it when
// is_partial, so a figure of a cut-short arm is not read as a whole one.
std::string shown_label(const ArmResults& arm);

// "pool" for "pool12", "rank" for "rank0": a role's kind.
std::string role_kind(const std::string& role);

}  // namespace quartet::analysis

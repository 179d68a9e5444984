#pragma once

// The planner against a finished run (docs/plan.md): every arm of the run predicted from
// a cluster profile, never from the run's own timings, beside the samples per second of
// training time it measured. `quartet plan --check` prints it; `quartet report
// --cluster` adds it to report.md.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/plan/arm.h"
#include "analysis/plan/cluster.h"
#include "analysis/results_model.h"
#include "analysis/tables.h"

namespace quartet::analysis {

// A spec's arm (its JSON with every default filled in, as a run records it) as the
// planner reads it: its regime's fields onto a mesh and knobs. `train_samples` sizes a
// federated client's data (0: a batch). std::invalid_argument for an unknown link.
plan::PlanArm plan_arm_of(const nlohmann::json& arm, const std::string& model, int64_t train_samples);

// The planner's name for an arm's model (unet3d at its patch: unet3d-64), from the
// spec's workload object and the arm's.
std::string plan_model_name(const nlohmann::json& workload, const nlohmann::json& arm);

struct CheckRow {
  std::string arm;
  std::string regime;
  double predicted = 0.0;    // samples/s; 0 when not planned
  double measured = 0.0;     // samples/s of training time; 0 when not measured
  std::string unsupported;   // why the planner did not predict it
};

// A federated arm's rounds as its records give them: per round, per pool (process), the
// samples each client it trained took; empty for an arm without client records.
std::vector<std::vector<std::vector<int64_t>>> client_rounds(const ArmResults& arm);

// Every arm of `run` predicted on `cluster`, each with the compute threads its processes
// had (the run's summaries say). `train_samples`: the training set's size (0: the spec's
// workload.train_samples, else samples over epochs of an arm's summary), which a
// federated client's share is of.
std::vector<CheckRow> check_rows(const RunResults& run, const plan::ClusterProfile& cluster, int64_t train_samples = 0);
// arm, regime, predicted, measured, error.
Table check_table(const std::vector<CheckRow>& rows);
// "Median |error| over N arms: M %, largest L %", or "" when no arm has both.
std::string check_summary(const std::vector<CheckRow>& rows);

// The report's section "Predicted beside measured": what the prediction assumes (one
// paragraph, plain text), then the table and the summary.
std::string check_intro(const plan::ClusterProfile& cluster);
// The section in Markdown, its heading included, to append to report.md; "" without a
// profile. (The HTML report builds it from the same pieces.)
std::string check_markdown(const RunResults& run, const plan::ClusterProfile* cluster);

}  // namespace quartet::analysis

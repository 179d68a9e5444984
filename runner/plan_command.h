#pragma once

// `quartet plan SPEC --cluster FILE [--devices N] [--json]`: each arm of an experiment
// predicted on a cluster profile (docs/plan.md): step time, samples/s, memory per
// device by tag, bytes per link level, MFU and the bottleneck in words.

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/plan/arm.h"
#include "analysis/plan/cluster.h"
#include "analysis/plan/cost.h"
#include "runner/spec.h"

namespace CLI {
class App;
}

namespace quartet::runner {

struct PlanOptions {
  std::string spec_path;
  std::string check_run;  // a finished run folder: its arms predicted beside what they measured
  std::string cluster_path;
  int64_t devices = 0;  // 0: the whole cluster
  bool json = false;
  std::string reproduce;  // "megatron-table1": the published table predicted on --cluster
  bool search = false;    // rank every mesh and setting for the spec's first arm
  int top = 10;           // rows the search prints
  std::string out;        // the search's top rows as a ready experiment file
};

CLI::App* add_plan_command(CLI::App& app, PlanOptions& options);

// Prints the table (or JSON). Returns 0. InputError (exit 2) for a bad spec, cluster
// file, device count, or an arm the planner cannot take (naming it and why).
int plan_main(const PlanOptions& options);

// Arm `index` of `spec` as the planner reads it (analysis/plan_check.h's plan_arm_of
// on the arm's JSON, with the experiment's threads); `train_samples` sizes a federated
// client's data. std::invalid_argument for an arm the planner cannot read.
analysis::plan::PlanArm plan_arm_of(const ExperimentSpec& spec, size_t index, int64_t train_samples);

// An experiment file read as `quartet run` reads it, less this machine's limits (a plan
// is for other machines); SpecError naming the file and field.
ExperimentSpec load_plan_spec(const std::string& path);

// The profile of --cluster, cut to --devices; InputError naming what is wrong.
analysis::plan::ClusterProfile load_cluster(const PlanOptions& options);

// Every arm of `spec` predicted on `cluster`; an arm the planner cannot take comes back
// with `unsupported` saying why.
std::vector<analysis::plan::Prediction> plan_spec(const ExperimentSpec& spec, const analysis::plan::ClusterProfile& cluster);
// The terminal table: a row per arm (80 columns), its bottleneck and memory by tag below.
std::string plan_table(const std::vector<analysis::plan::Prediction>& predictions);

// `quartet plan --check RUN --cluster FILE`: every arm of the run predicted from the
// profile (not from the run's own timings), beside its measured samples per second, and
// the error distribution. Returns 0; InputError for a folder that is no run.
int plan_check_main(const PlanOptions& options);

// `quartet plan SPEC --cluster FILE --search [--top N] [--out FILE]`: every mesh and
// setting for the spec's first arm's model and batch, ranked; the top rows that an
// existing regime runs are written as the arms of an experiment file. Returns 0.
int plan_search_main(const PlanOptions& options);

}  // namespace quartet::runner

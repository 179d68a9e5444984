// `quartet plan --check RUN`: the planner against what a run measured on this machine.

#include <iostream>

#include "analysis/plan_check.h"
#include "analysis/results_model.h"
#include "runner/plan_command.h"
#include "runner/wiring.h"

namespace quartet::runner {

namespace plan = analysis::plan;

int plan_check_main(const PlanOptions& o) {
  const plan::ClusterProfile cluster = load_cluster(o);
  analysis::RunResults run;
  try {
    run = analysis::load_run(o.check_run);
  } catch (const std::exception& e) {
    throw InputError("--check: " + o.check_run + ": " + e.what());
  }
  // A federated client's share of the training set: the dataset's size when the spec
  // takes all of it and the dataset is at hand.
  int64_t train_samples = 0;
  try {
    train_samples = workload_train_size(parse_spec(run.spec, /*machine_limits=*/false));
  } catch (const std::exception&) {
    train_samples = 0;
  }
  const std::vector<analysis::CheckRow> rows = analysis::check_rows(run, cluster, train_samples);
  std::cout << "run " << run.name << " (" << o.check_run << ") predicted on " << cluster.name
            << "; samples/s, training time only\n\n"
            << analysis::text_table(analysis::check_table(rows), 80, {1});
  if (const std::string summary = analysis::check_summary(rows); !summary.empty()) std::cout << "\n" << summary << "\n";
  return 0;
}

}  // namespace quartet::runner

// `quartet plan --check RUN`: the planner against what a run measured on this machine.

#include <algorithm>
#include <cmath>
#include <iostream>

#include "analysis/results_model.h"
#include "analysis/tables.h"
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
  ExperimentSpec spec;
  try {
    spec = parse_spec(run.spec, /*machine_limits=*/false);
  } catch (const std::exception& e) {
    throw InputError("--check: " + o.check_run + ": its spec does not parse: " + e.what());
  }
  // The compute threads each process had (the launcher gives fewer when other work keeps
  // cores busy): the arm's rate on this machine depends on them.
  for (ArmSpec& arm : spec.arms)
    for (const analysis::ArmResults& a : run.arms)
      if (a.name == arm.name && a.summary.is_object() && a.summary.contains("threads_per_process"))
        arm.threads = a.summary["threads_per_process"].get<int>();
  const std::vector<plan::Prediction> predictions = plan_spec(spec, cluster);
  std::cout << "run " << run.name << " (" << o.check_run << ") predicted on " << cluster.name
            << "; samples/s, training time only\n\n";
  analysis::Table t{{"arm", "regime", "predicted", "measured", "error"}, {false, false, true, true, true}, {}};
  std::vector<double> errors;
  for (const plan::Prediction& p : predictions) {
    const auto arm = std::find_if(run.arms.begin(), run.arms.end(), [&](const analysis::ArmResults& a) { return a.name == p.arm; });
    const double measured = arm == run.arms.end() ? 0.0 : analysis::samples_per_second(*arm);
    if (!p.unsupported.empty()) {
      t.rows.push_back({p.arm, p.regime, "-", measured > 0 ? analysis::fixed(measured, 1) : "-", "not planned"});
      continue;
    }
    if (measured <= 0) {
      t.rows.push_back({p.arm, p.regime, analysis::fixed(p.samples_per_second, 1), "-", "not measured"});
      continue;
    }
    const double error = (p.samples_per_second - measured) / measured;
    errors.push_back(std::fabs(error));
    std::string shown = error >= 0 ? "+" : "";
    shown += analysis::fixed(100 * error, 1);
    shown += " %";
    t.rows.push_back({p.arm, p.regime, analysis::fixed(p.samples_per_second, 1), analysis::fixed(measured, 1), shown});
  }
  std::cout << analysis::text_table(t, 80, {1});
  if (!errors.empty()) {
    std::sort(errors.begin(), errors.end());
    const size_t n = errors.size();
    const double median = n % 2 ? errors[n / 2] : (errors[n / 2 - 1] + errors[n / 2]) / 2;
    std::cout << "\n|error| over " << n << " arm" << (n == 1 ? "" : "s") << ": median "
              << analysis::fixed(100 * median, 1) << " %, largest " << analysis::fixed(100 * errors.back(), 1) << " %\n";
  }
  return 0;
}

}  // namespace quartet::runner

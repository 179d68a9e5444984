// `quartet plan SPEC --cluster FILE --search`: ranked meshes and settings, and the top
// rows as a ready experiment file.

#include <chrono>
#include <fstream>
#include <iostream>

#include "analysis/plan/search.h"
#include "analysis/tables.h"
#include "runner/plan_command.h"
#include "runner/wiring.h"

namespace quartet::runner {

namespace plan = analysis::plan;
using nlohmann::json;

namespace {

// The spec arm that runs `c`: the one regime of its one axis, or the mesh regime.
json arm_json(const plan::Candidate& c, const plan::ModelShape& model) {
  const plan::PlanArm& a = c.arm;
  const std::string& regime = a.regime;  // search's: the one regime of its one axis, or mesh
  // "dp8×tp2-z1" as a spec's arm name: "dp8-tp2-z1".
  const std::string times = "×";
  std::string name;
  for (size_t i = 0; i < a.name.size();) {
    const bool cross = a.name.compare(i, times.size(), times) == 0;
    name += cross ? '-' : a.name[i];
    i += cross ? times.size() : 1;
  }
  json arm = {{"name", name}, {"regime", regime}};
  if (regime == "mesh") {
    json mesh = json::object();
    for (const char* axis : plan::kMeshAxes)
      if (a.mesh.size(axis) > 1) mesh[axis] = a.mesh.size(axis);
    arm["mesh"] = mesh;
    if (a.zero > 0) arm["zero"] = a.zero;
    if (a.micro_batches > 1) arm["micro_batches"] = a.micro_batches;
  } else if (regime == "expert_parallel") {
    arm["ranks"] = a.mesh.ep;
    if (a.micro_batches > 1) arm["micro_batches"] = a.micro_batches;
  } else if (regime == "data_parallel") {
    arm["ranks"] = a.mesh.dp;
    arm["zero"] = a.zero;
    if (a.micro_batches > 1) arm["micro_batches"] = a.micro_batches;
  } else if (regime == "tensor_parallel") {
    arm["ranks"] = a.mesh.tp;
  } else if (regime == "context_parallel") {
    arm["ranks"] = a.mesh.cp;
  } else if (regime == "accumulate") {
    arm["micro_batches"] = a.micro_batches;
  } else if (regime == "pipeline") {
    const std::vector<size_t> starts = plan::pipeline_stage_starts(model, a.mesh.pp, {});
    json cuts = json::array();
    for (size_t k = 1; k < starts.size(); ++k) cuts.push_back(model.layers[starts[k] - 1].stage);
    arm["cuts"] = cuts;
    arm["micro_batches"] = a.micro_batches;
    arm["schedule"] = a.schedule;
  }
  if (a.checkpointing) arm["train"] = {{"checkpoint", true}};
  return arm;
}

void write_experiment(const PlanOptions& o, const ExperimentSpec& spec, const std::vector<plan::Candidate>& top,
                      const plan::ModelShape& model) {
  json j = spec.json;
  j["name"] = spec.name + "-planned";
  // Each row checked as a spec of its own: a setting this build does not train (a mesh
  // combination it refuses) is left out, saying why.
  json arms = json::array();
  std::string left_out;
  for (const plan::Candidate& c : top) {
    const json arm = arm_json(c, model);
    json one = j;
    one["arms"] = json::array({arm});
    try {
      parse_spec(one, /*machine_limits=*/false);
      arms.push_back(arm);
    } catch (const std::exception& e) {
      left_out += "  " + c.arm.name + ": " + e.what() + "\n";
    }
  }
  if (arms.empty()) throw InputError("--out: none of the top rows is a setting this build trains:\n" + left_out);
  j["arms"] = arms;
  try {
    parse_spec(j, /*machine_limits=*/false);  // what is written is a spec quartet runs
  } catch (const std::exception& e) {
    throw InputError(std::string("--out: the planned arms do not make a valid spec: ") + e.what());
  }
  std::ofstream out(o.out);
  out << "// Planned by quartet plan " << o.spec_path << " --search: the top rows this build trains, fastest first.\n"
      << j.dump(2) << "\n";
  if (!out) throw InputError("--out: " + o.out + " cannot be written");
  std::cout << "wrote " << arms.size() << " arm" << (arms.size() == 1 ? "" : "s") << " to " << o.out << "\n";
  if (!left_out.empty()) std::cout << "left out, as this build does not train them:\n" << left_out;
}

}  // namespace

int plan_search_main(const PlanOptions& o) {
  const ExperimentSpec spec = load_plan_spec(o.spec_path);
  const plan::ClusterProfile cluster = load_cluster(o);
  plan::PlanArm base;
  plan::ModelShape model;
  try {
    base = plan_arm_of(spec, 0, spec.workload.train_samples);
    model = plan::model_shape(base.model);
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
  const std::string& name = base.model;
  const auto t0 = std::chrono::steady_clock::now();
  const plan::SearchResult r = plan::search(model, base, cluster);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "search for " << name << ", batch " << base.batch << ", on " << cluster.name << " (" << cluster.devices()
            << " devices): " << r.tried << " settings predicted in " << analysis::format_seconds(seconds) << ", "
            << r.ranked.size() << " fit, " << r.too_big << " do not, " << r.refused
            << " meshes do not split the model\n\n";
  analysis::Table t{{"#", "arm", "regime", "step", "samples/s", "mem/dev", "MFU"},
                    {true, false, false, true, true, true, true},
                    {}};
  const size_t shown = std::min<size_t>(r.ranked.size(), static_cast<size_t>(o.top));
  for (size_t i = 0; i < shown; ++i) {
    const plan::Prediction& p = r.ranked[i].prediction;
    t.rows.push_back({std::to_string(i + 1), r.ranked[i].arm.name, r.ranked[i].arm.regime,
                      analysis::format_seconds(p.step_seconds), analysis::fixed(p.samples_per_second, 0),
                      analysis::format_bytes(p.memory.total()), analysis::fixed(100 * p.mfu, 1) + "%"});
  }
  std::cout << analysis::text_table(t, 80, {2, 6});
  if (!o.out.empty())
    write_experiment(o, spec, std::vector<plan::Candidate>(r.ranked.begin(), r.ranked.begin() + static_cast<long>(shown)),
                     model);
  return 0;
}

}  // namespace quartet::runner

#include "runner/plan_command.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "analysis/plan/cluster.h"
#include "analysis/plan/cost.h"
#include "analysis/plan/megatron.h"
#include "analysis/plan_check.h"
#include "analysis/tables.h"
#include "runner/wiring.h"

namespace quartet::runner {

namespace plan = analysis::plan;
using nlohmann::json;

namespace {

using analysis::fixed;
using analysis::format_bytes;

std::string rate(double v) {
  if (v >= 1e6) return fixed(v / 1e6, 2) + "M";
  if (v >= 1e4) return fixed(v / 1e3, 1) + "k";
  return fixed(v, v >= 100 ? 0 : 1);
}

}  // namespace

analysis::plan::PlanArm plan_arm_of(const ExperimentSpec& spec, size_t index, int64_t train_samples) {
  nlohmann::json arm = spec.json["arms"][index];
  arm["threads"] = spec.arms[index].threads;  // the experiment's, where the arm has none
  return analysis::plan_arm_of(arm, analysis::plan_model_name(spec.json["workload"], arm), train_samples);
}

CLI::App* add_plan_command(CLI::App& app, PlanOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "plan", "Predict each arm's step time, memory and traffic on a cluster profile (docs/plan.md)");
  cmd->add_option("spec", o.spec_path, "experiment file");
  cmd->add_option("--check", o.check_run, "a finished run folder: predict its arms from --cluster (this machine's "
                                          "calibrated profile) and print predicted, measured and the error");
  cmd->add_option("--cluster", o.cluster_path, "cluster profile (clusters/*.json)")->required();
  cmd->add_option("--devices", o.devices, "use this many of the cluster's devices (cpu: cores); default all")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", o.json, "print JSON instead of the table");
  cmd->add_option("--reproduce", o.reproduce,
                  "megatron-table1: Narayanan et al. (SC'21) Table 1 predicted on --cluster, calibrated on its first "
                  "row (docs/plan.md)")
      ->check(CLI::IsMember({"megatron-table1"}));
  cmd->add_flag("--search", o.search,
                "rank every mesh (dp x tp x pp x cp dividing the devices), ZeRO stage, micro-batch count and "
                "checkpointing for the spec's first arm by predicted step time, among those that fit");
  cmd->add_option("--top", o.top, "--search: rows to print")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--out", o.out, "--search: write the top rows as a ready experiment file");
  return cmd;
}

namespace {

}  // namespace

ExperimentSpec load_plan_spec(const std::string& path) {
  // Planned, not run here: this machine's limits on processes and clients do not apply.
  try {
    return parse_spec(read_spec_json(path), /*machine_limits=*/false);
  } catch (const SpecError& e) {
    throw SpecError(path + ": " + e.what());
  }
}

plan::ClusterProfile load_cluster(const PlanOptions& o) {
  plan::ClusterProfile c;
  try {
    c = plan::load_cluster_file(o.cluster_path);
  } catch (const plan::ClusterError& e) {
    throw InputError(std::string("--cluster: ") + e.what());
  }
  if (o.devices > 0) {
    if (o.devices > c.devices())
      throw InputError("--devices: " + std::to_string(o.devices) + " is more than " + c.name + "'s " +
                       std::to_string(c.devices()) + " devices");
    c.nodes = (o.devices + c.devices_per_node - 1) / c.devices_per_node;
    if (o.devices % c.devices_per_node != 0 && c.nodes > 1)
      throw InputError("--devices: " + std::to_string(o.devices) + " is not whole nodes of " +
                       std::to_string(c.devices_per_node));
    if (c.nodes == 1) c.devices_per_node = o.devices;
  }
  return c;
}

namespace {

json prediction_json(const plan::Prediction& p) {
  const plan::MemoryBytes& m = p.memory;
  return {{"arm", p.arm},
          {"regime", p.regime},
          {"mesh", p.mesh},
          {"ranks", p.ranks},
          {"step_seconds", p.step_seconds},
          {"samples_per_second", p.samples_per_second},
          {"compute_seconds", p.compute_seconds},
          {"comm_seconds", p.comm_seconds},
          {"bubble_seconds", p.bubble_seconds},
          {"memory_bytes",
           {{"parameters", m.parameters},
            {"gradients", m.gradients},
            {"optimizer_state", m.optimizer_state},
            {"activations", m.activations},
            {"communication", m.communication},
            {"workspace", m.workspace},
            {"total", m.total()}}},
          {"memory_capacity_bytes", p.memory_capacity},
          {"fits", p.fits},
          {"bytes_per_step", {{"intra_node", p.intra_bytes}, {"inter_node", p.inter_bytes}}},
          {"mfu", p.mfu},
          {"bottleneck", p.bottleneck}};
}

}  // namespace

std::vector<plan::Prediction> plan_spec(const ExperimentSpec& spec, const plan::ClusterProfile& cluster) {
  std::vector<plan::Prediction> out;
  // A federated client's data: its share of the training set (the dataset's size when
  // the spec takes all of it and the dataset is at hand).
  int64_t train_samples = spec.workload.train_samples;
  if (train_samples == 0) try {
      train_samples = workload_train_size(spec);
    } catch (const std::exception&) {
      train_samples = 0;
    }
  for (size_t i = 0; i < spec.arms.size(); ++i) {
    try {
      const plan::PlanArm p = plan_arm_of(spec, i, train_samples);
      out.push_back(plan::predict(plan::model_shape(p.model), p, cluster));
    } catch (const std::invalid_argument& e) {
      plan::Prediction none;
      none.arm = spec.arms[i].name;
      none.regime = spec.arms[i].regime;
      none.unsupported = e.what();
      out.push_back(none);
    }
  }
  return out;
}

std::string plan_table(const std::vector<plan::Prediction>& predictions) {
  analysis::Table t{{"arm", "mesh", "step", "samples/s", "mem/dev", "intra", "inter", "MFU"},
                    {false, false, true, true, true, true, true, true},
                    {}};
  analysis::Table memory{{"arm", "params", "grads", "optim", "activ", "comm", "work"},
                         {false, true, true, true, true, true, true},
                         {}};
  std::string words;
  for (const plan::Prediction& p : predictions) {
    if (!p.unsupported.empty()) {
      words += "  " + p.arm + ": not planned:\n    " + p.unsupported + "\n";
      continue;
    }
    t.rows.push_back({p.arm, p.mesh, analysis::format_seconds(p.step_seconds), rate(p.samples_per_second),
                      format_bytes(p.memory.total()) + (p.fits ? "" : "!"), format_bytes(p.intra_bytes),
                      format_bytes(p.inter_bytes), p.mfu > 0 ? fixed(100 * p.mfu, 1) + "%" : "-"});
    const plan::MemoryBytes& m = p.memory;
    memory.rows.push_back({p.arm, format_bytes(m.parameters), format_bytes(m.gradients), format_bytes(m.optimizer_state),
                           format_bytes(m.activations), format_bytes(m.communication), format_bytes(m.workspace)});
    words += "  " + p.arm + ": " + p.bottleneck + "\n";
  }
  // Narrow terminals lose the traffic columns first, then MFU.
  return analysis::text_table(t, 80, {5, 6, 7}) + "\nbottlenecks:\n" + words + "\nmemory per device by tag:\n" +
         analysis::text_table(memory, 80, {5, 6});
}

namespace {

int reproduce_megatron(const plan::ClusterProfile& cluster) {
  const plan::ClusterProfile calibrated = plan::calibrated_on_first_row(cluster);
  std::cout << "Narayanan et al. (SC'21) Table 1 on " << cluster.name << ", calibrated on the first row: matmul "
            << fixed(calibrated.device.efficiency.matmul, 3) << ", attention "
            << fixed(calibrated.device.efficiency.attention, 3) << " of the peak\n\n";
  analysis::Table t{{"model", "tp", "pp", "GPUs", "batch", "paper", "predicted", "error", "mem/GPU"},
                    {false, true, true, true, true, true, true, true, true},
                    {}};
  for (const plan::MegatronPrediction& p : plan::predict_megatron_table(calibrated)) {
    std::string error = p.error >= 0 ? "+" : "";
    error += fixed(100 * p.error, 1) + " %";
    t.rows.push_back({p.row.model, std::to_string(p.row.tp), std::to_string(p.row.pp), std::to_string(p.row.gpus),
                      std::to_string(p.row.batch), fixed(p.row.teraflops, 0), fixed(p.teraflops, 1), error,
                      format_bytes(p.memory_bytes) + (p.fits ? "" : "!")});
  }
  std::cout << analysis::text_table(t, 80, {4}) << "\nteraFLOP/s per GPU as the paper counts them; ! does not fit\n";
  return 0;
}

}  // namespace

int plan_main(const PlanOptions& o) {
  if (!o.reproduce.empty()) return reproduce_megatron(load_cluster(o));
  if (!o.check_run.empty()) {
    if (!o.spec_path.empty()) throw InputError("plan: give an experiment file or --check RUN, not both");
    return plan_check_main(o);
  }
  if (o.spec_path.empty()) throw InputError("plan: give an experiment file (or --check RUN)");
  if (o.search) return plan_search_main(o);
  if (!o.out.empty()) throw InputError("--out: only with --search");
  const ExperimentSpec spec = load_plan_spec(o.spec_path);
  const plan::ClusterProfile cluster = load_cluster(o);
  const std::vector<plan::Prediction> predictions = plan_spec(spec, cluster);
  if (o.json) {
    json arms = json::array();
    for (const plan::Prediction& p : predictions)
      arms.push_back(p.unsupported.empty() ? prediction_json(p)
                                           : json{{"arm", p.arm}, {"regime", p.regime}, {"unsupported", p.unsupported}});
    std::cout << json{{"experiment", spec.name}, {"cluster", cluster.name}, {"devices", cluster.devices()}, {"arms", arms}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << "experiment " << spec.name << " on " << cluster.name << ": " << cluster.nodes << " node"
            << (cluster.nodes == 1 ? "" : "s") << " x " << cluster.devices_per_node << " " << cluster.device.name
            << "\n"
            << "per step; memory and bytes per device; ! does not fit\n\n"
            << plan_table(predictions);
  return 0;
}

}  // namespace quartet::runner

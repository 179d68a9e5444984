#include "analysis/plan_check.h"

#include <algorithm>
#include <cmath>

#include "analysis/plan/cost.h"
#include "analysis/plan/model_shape.h"
#include "transport/link.h"

namespace quartet::analysis {

using nlohmann::json;

namespace {

int64_t integer(const json& j, const char* key, int64_t fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

std::string text_of(const json& j, const char* key, const std::string& fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace

std::string plan_model_name(const json& workload, const json& arm) {
  const std::string model = text_of(arm, "model", text_of(workload, "model", ""));
  if (model == "unet3d") {
    const int64_t patch = integer(arm, "patch", 0);
    return "unet3d-" + std::to_string(patch > 0 ? patch : integer(workload, "patch", 32));
  }
  return model;
}

plan::PlanArm plan_arm_of(const json& f, const std::string& model, int64_t train_samples) {
  const json& train = f.contains("train") ? f["train"] : json::object();
  plan::PlanArm p;
  p.name = text_of(f, "name", "");
  p.regime = text_of(f, "regime", "");
  p.model = model;
  p.batch = integer(train, "batch", 1);
  p.threads = static_cast<int>(integer(f, "threads", 0));
  p.checkpointing = train.value("checkpoint", false);
  if (train.contains("optimizer")) p.optimizer = text_of(train["optimizer"], "name", p.optimizer);
  const int64_t ranks = integer(f, "ranks", 1);
  p.micro_batches = integer(f, "micro_batches", 1);
  if (p.regime == "data_parallel") {
    p.mesh.dp = ranks;
    p.zero = integer(f, "zero", 0);
    p.bucket_bytes = f.value("bucket_mb", 25.0) * 1024 * 1024;
    if (text_of(f, "backend", "") == "hierarchical") p.algorithm = "hierarchical";
  } else if (p.regime == "tensor_parallel") {
    p.mesh.tp = ranks;
    p.sequence_parallel = f.value("sequence_parallel", false);
  } else if (p.regime == "context_parallel") {
    p.mesh.cp = ranks;
  } else if (p.regime == "expert_parallel") {
    p.mesh.ep = ranks;
  } else if (p.regime == "mesh") {
    const json& m = f.contains("mesh") && f["mesh"].is_object() ? f["mesh"] : json::object();
    for (const char* axis : plan::kMeshAxes) p.mesh.size(axis) = integer(m, axis, 1);
    p.schedule = "sequential";  // the mesh runs micro-batches through its stages in turn
    p.zero = integer(f, "zero", 0);
    p.sequence_parallel = f.value("sequence_parallel", false);
    p.bucket_bytes = f.value("bucket_mb", 25.0) * 1024 * 1024;
  } else if (p.regime == "pipeline") {
    if (f.contains("cuts") && f["cuts"].is_array()) p.cuts = f["cuts"].get<std::vector<std::string>>();
    p.mesh.pp = static_cast<int64_t>(p.cuts.size()) + 1;
    p.schedule = text_of(f, "schedule", "1f1b");
  } else if (p.regime == "split") {
    p.clients = integer(f, "clients", 1);
    p.variant = text_of(f, "variant", "vanilla");
    if (f.contains("cuts") && f["cuts"].is_array()) p.cuts = f["cuts"].get<std::vector<std::string>>();
    else if (f.contains("cut") && f["cut"].is_string()) p.cuts = {f["cut"].get<std::string>()};
  } else if (p.regime == "federated") {
    p.clients = integer(f, "clients", 10);
    p.fraction = f.value("fraction", 1.0);
    p.local_epochs = integer(f, "local_epochs", 1);
    p.client_samples = train_samples > 0 ? train_samples / std::max<int64_t>(1, p.clients) : 0;
  }
  if (p.regime != "pipeline" && p.regime != "accumulate" && p.regime != "data_parallel" &&
      p.regime != "expert_parallel" && p.regime != "mesh")
    p.micro_batches = 1;
  if (const std::string link = text_of(f, "link", "loopback"); link != "loopback") {
    const transport::LinkProfile profile = transport::link_profile(link);
    p.link = link;
    p.link_bandwidth_bytes_per_s = profile.bandwidth_bits_per_s / 8.0;
    p.link_latency_s = profile.latency_s;
  }
  return p;
}

std::vector<std::vector<std::vector<int64_t>>> client_rounds(const ArmResults& arm) {
  std::vector<const trainers::RoleRecords*> pools;
  for (const trainers::RoleRecords& r : arm.roles)
    if (r.role.rfind("pool", 0) == 0) pools.push_back(&r);
  std::vector<std::vector<std::vector<int64_t>>> rounds;
  for (size_t k = 0; k < pools.size(); ++k)
    for (const json& rec : pools[k]->records) {
      if (!rec.is_object() || rec.value("type", "") != "client_round") continue;
      const int64_t round = rec.value("round", int64_t{0}), samples = rec.value("samples_processed", int64_t{0});
      if (round < 1 || round > 1000000 || samples < 0) continue;
      if (rounds.size() < static_cast<size_t>(round))
        rounds.resize(static_cast<size_t>(round), std::vector<std::vector<int64_t>>(pools.size()));
      rounds[static_cast<size_t>(round - 1)][k].push_back(samples);
    }
  // A round no pool reported (an interrupted run's last) says nothing.
  std::erase_if(rounds, [](const auto& r) { return std::all_of(r.begin(), r.end(), [](const auto& p) { return p.empty(); }); });
  return rounds;
}

std::vector<CheckRow> check_rows(const RunResults& run, const plan::ClusterProfile& cluster, int64_t train_samples) {
  const json& workload = run.spec.contains("workload") ? run.spec["workload"] : json::object();
  if (train_samples == 0) train_samples = integer(workload, "train_samples", 0);
  // The whole training set (train_samples 0): its size is what an epoch counts, which
  // every arm's summary gives as samples over epochs.
  for (auto a = run.arms.begin(); train_samples == 0 && a != run.arms.end(); ++a) {
    const double samples = a->summary.is_object() ? a->summary.value("samples", 0.0) : 0.0;
    const double epochs = a->summary.is_object() ? a->summary.value("epochs", 0.0) : 0.0;
    if (samples > 0 && epochs > 0) train_samples = std::llround(samples / epochs);
  }
  std::vector<CheckRow> rows;
  if (!run.spec.contains("arms") || !run.spec["arms"].is_array()) return rows;
  for (json arm : run.spec["arms"]) {
    CheckRow row;
    row.arm = text_of(arm, "name", "");
    row.regime = text_of(arm, "regime", "");
    const auto measured = std::find_if(run.arms.begin(), run.arms.end(), [&](const ArmResults& a) { return a.name == row.arm; });
    if (measured != run.arms.end()) {
      row.measured = samples_per_second(*measured);
      // The compute threads each process had (fewer when other work kept cores busy).
      if (measured->summary.is_object() && measured->summary.contains("threads_per_process"))
        arm["threads"] = measured->summary["threads_per_process"];
    }
    try {
      const std::string model = plan_model_name(workload, arm);
      plan::PlanArm planned = plan_arm_of(arm, model, train_samples);
      if (measured != run.arms.end() && planned.regime == "federated") planned.client_rounds = client_rounds(*measured);
      row.predicted = plan::predict(plan::model_shape(model), planned, cluster).samples_per_second;
    } catch (const std::invalid_argument& e) {
      row.unsupported = e.what();
    }
    rows.push_back(row);
  }
  return rows;
}

Table check_table(const std::vector<CheckRow>& rows) {
  Table t{{"arm", "regime", "predicted", "measured", "error"}, {false, false, true, true, true}, {}};
  for (const CheckRow& r : rows) {
    const std::string measured = r.measured > 0 ? fixed(r.measured, 1) : "-";
    if (!r.unsupported.empty()) {
      t.rows.push_back({r.arm, r.regime, "-", measured, "not planned"});
      continue;
    }
    if (r.measured <= 0) {
      t.rows.push_back({r.arm, r.regime, fixed(r.predicted, 1), "-", "not measured"});
      continue;
    }
    const double error = (r.predicted - r.measured) / r.measured;
    std::string shown = error >= 0 ? "+" : "";
    shown += fixed(100 * error, 1);
    shown += " %";
    t.rows.push_back({r.arm, r.regime, fixed(r.predicted, 1), measured, shown});
  }
  return t;
}

std::string check_summary(const std::vector<CheckRow>& rows) {
  std::vector<double> errors;
  for (const CheckRow& r : rows)
    if (r.unsupported.empty() && r.measured > 0) errors.push_back(std::fabs((r.predicted - r.measured) / r.measured));
  if (errors.empty()) return "";
  std::sort(errors.begin(), errors.end());
  const size_t n = errors.size();
  const double median = n % 2 ? errors[n / 2] : (errors[n / 2 - 1] + errors[n / 2]) / 2;
  return "Median |error| over " + std::to_string(n) + " arm" + (n == 1 ? "" : "s") + ": " + fixed(100 * median, 1) +
         " %, largest " + fixed(100 * errors.back(), 1) + " %";
}

std::string check_intro(const plan::ClusterProfile& cluster) {
  return "Every arm predicted by the planner (docs/plan.md) on the profile " + cluster.name +
         ", from the profile alone, never from this run's timings, beside the samples per second of training time "
         "it measured.";
}

std::string check_markdown(const RunResults& run, const plan::ClusterProfile* cluster) {
  if (!cluster) return "";
  const std::vector<CheckRow> rows = check_rows(run, *cluster);
  const std::string summary = check_summary(rows);
  return "\n## Predicted beside measured\n\n" + check_intro(*cluster) + "\n\n" + to_markdown(check_table(rows)) +
         (summary.empty() ? "" : "\n" + summary + "\n");
}

}  // namespace quartet::analysis

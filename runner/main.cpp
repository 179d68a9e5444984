// quartet: the headless runner. `quartet run spec.json` runs an experiment's arms and
// prints the side-by-side table; see `quartet --help`.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>

#include "engine/cpu/conv_kernel.h"
#include "engine/safetensors.h"
#include "runner/bench_collectives.h"
#include "runner/calibrate_command.h"
#include "runner/certs_command.h"
#include "runner/export_command.h"
#include "runner/inspect_command.h"
#include "runner/launch_command.h"
#include "runner/launcher.h"
#include "runner/phantom_command.h"
#include "runner/plan_command.h"
#include "runner/predict_command.h"
#include "runner/report_command.h"
#include "runner/sample_command.h"
#include "runner/tune_command.h"
#include "runner/spec.h"
#include "runner/wiring.h"
#include "trainers/regime.h"
#include "workloads/models.h"
#include "workloads/onnx/model.h"
#include "workloads/workload.h"

namespace {

using namespace quartet;
using namespace quartet::runner;

int cmd_validate(const std::string& path) {
  const ExperimentSpec spec = load_spec_file(path);
  check_experiment(spec);  // what `quartet run` checks before it starts
  std::cout << path << ": ok, experiment \"" << spec.name << "\" with " << spec.arms.size() << " arm"
            << (spec.arms.size() == 1 ? "" : "s") << "\n";
  return 0;
}

// `quartet list models --onnx FILE`: the one model read from FILE, with its stages.
int cmd_list_onnx(const std::string& file) {
  const std::string name = std::string(workloads::onnx::kPrefix) + file;
  workloads::ModelInfo m;
  try {
    m = workloads::model_info(name);
  } catch (const std::invalid_argument& e) {
    throw InputError(std::string("--onnx: ") + e.what());
  }
  std::cout << "models (stages in order; a split cut names the client's last stage):\n  " << m.name << "  ("
            << m.parameters << " parameters)  stages:";
  for (const auto& s : m.stages) std::cout << " " << s;
  std::cout << "\n      input " << engine::shape_str(m.input_shape) << " per sample, " << m.num_classes
            << " classes\n";
  return 0;
}

int cmd_list(const std::string& what) {
  if (what == "workloads" || what == "all") {
    std::cout << "workloads:\n";
    for (const auto& w : workloads::workload_names()) std::cout << "  " << w << "\n";
  }
  if (what == "models" || what == "all") {
    std::cout << "models (stages in order; a split cut names the client's last stage):\n";
    for (const auto& m : workloads::model_catalog()) {
      std::cout << "  " << m.name << "  (" << m.parameters << " parameters)  stages:";
      for (const auto& s : m.stages) std::cout << " " << s;
      std::string fits;
      for (const std::string& w : workloads::workload_names()) {
        const std::vector<std::string> models = workloads::workload_model_names(w);
        if (std::find(models.begin(), models.end(), m.name) != models.end()) fits += (fits.empty() ? "" : ", ") + w;
      }
      std::cout << "\n      " << m.description << "\n      workloads: " << (fits.empty() ? "none" : fits) << "\n";
    }
  }
  if (what == "regimes" || what == "all") {
    std::cout << "regimes:\n";
    for (const trainers::Regime* r : trainers::regime_table())
      std::cout << "  " << r->name() << "  " << r->summary() << "\n";
  }
  return 0;
}

int cmd_eval(const std::string& weights, const std::string& workload, const std::string& model,
             const std::string& data_dir, int64_t batch) {
  std::string where;
  std::optional<workloads::WorkloadConfig> recorded;
  if (workload.empty() || model.empty()) recorded = recorded_workload(weights, where);
  // The run's settings (data, volumes, test samples) apply to the run's workload only.
  if (recorded && !workload.empty() && workload != recorded->name) recorded.reset();
  workloads::WorkloadConfig cfg = recorded.value_or(workloads::WorkloadConfig{});
  cfg.name = !workload.empty() ? workload : recorded ? recorded->name : "fashion-mnist";
  cfg.model = !model.empty() ? model : recorded ? recorded->model : "";
  if (!recorded) where.clear();
  if (cfg.model.empty())
    throw InputError("--model: needed: " + weights +
                     " is not in a run folder (RUN/ARM/final.safetensors) that records its model; "
                     "quartet list models names them");
  if (!data_dir.empty()) cfg.data_dir = data_dir;
  std::unique_ptr<workloads::Workload> wl;
  try {
    wl = workloads::make_workload(cfg);
  } catch (const std::exception& e) {
    throw InputError(e.what());
  }
  std::shared_ptr<engine::Model> m = wl->make_model(cfg.model, 0);
  try {
    engine::load_state_dict(*m, engine::read_safetensors(weights).tensors);
  } catch (const engine::StateDictMismatch& e) {
    throw InputError(weights + ": " + e.brief() + "; are these weights of model " + cfg.model +
                     "? (--model; quartet list models)");
  } catch (const std::exception& e) {
    throw InputError(weights + ": " + e.what());
  }
  const double q = wl->evaluate(*m, batch);
  std::cout << wl->metric_name() << " " << q << " on " << wl->test_size() << " test samples of " << cfg.name
            << " (model " << cfg.model << (where.empty() ? "" : ", as recorded in " + where) << ")\n";
  return 0;
}

// Edits (insertions, deletions, substitutions) that turn `a` into `b`.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// A first argument that is no option and no command: "unknown command runn; did you mean
// run?" (the nearest command within two edits, as git says it), or "" when it is one.
std::string unknown_command(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-' || argv[1][0] == '\0') return "";
  const std::string given = argv[1];
  std::string nearest;
  size_t best = 3;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == given) return "";
    if (const size_t d = edit_distance(given, sub->get_name()); d < best) best = d, nearest = sub->get_name();
  }
  return "unknown command " + given + (nearest.empty() ? "" : "; did you mean " + nearest + "?") +
         " (quartet --help lists the commands)";
}

}  // namespace

int main(int argc, char** argv) {
  std::string regimes;
  for (const std::string& r : trainers::regime_names()) regimes += (regimes.empty() ? "" : ", ") + r;
  CLI::App app{"Quartet: one model trained under several regimes (" + regimes + "), side by side.\n"
               "Runs experiment files and shows what each regime costs and buys."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "quartet 0.1");

  RunOptions run;
  auto* run_cmd = app.add_subcommand("run", "Run an experiment's arms and print the summary table");
  run_cmd->add_option("spec", run.spec_path, "experiment file (JSON, comments allowed)");
  run_cmd->add_option("--out", run.out, "run folder to create (must not exist); default results/<name>-<time>");
  run_cmd->add_option("--progress", run.progress, "bar (default on a terminal), jsonl (event stream) or none")
      ->check(CLI::IsMember({"bar", "jsonl", "none"}));
  run_cmd->add_option("--init", run.init,
                      "initial weights for every arm of the workload's model (safetensors); default: from the seed");
  run_cmd->add_option("--resume", run.resume, "continue an interrupted run folder");
  run_cmd->add_option("--listen", run.listen,
                      "the coordinator's address, HOST or HOST:PORT (default 127.0.0.1, a fresh port); another "
                      "address lets roles on other hosts join");
  add_tls_options(*run_cmd, run.tls);

  std::string validate_path;
  auto* validate_cmd = app.add_subcommand("validate", "Check an experiment file; exit code 2 with the reason if bad");
  validate_cmd->add_option("spec", validate_path, "experiment file")->required();

  std::string list_what = "all";
  auto* list_cmd = app.add_subcommand("list", "List workloads, models (with stage names) and regimes");
  list_cmd->add_option("what", list_what, "workloads, models, regimes or all")
      ->check(CLI::IsMember({"workloads", "models", "regimes", "all"}));
  std::string list_onnx;
  list_cmd->add_option("--onnx", list_onnx, "with models: list the model of this ONNX file (its stages) alone");

  std::string eval_weights, eval_workload, eval_model, eval_data;
  int64_t eval_batch = 1000;
  auto* eval_cmd = app.add_subcommand("eval", "Test-set quality of saved weights");
  eval_cmd->add_option("weights", eval_weights, "weights (safetensors)")->required();
  eval_cmd->add_option("--workload", eval_workload,
                       "workload (quartet list workloads); default: the run folder's the weights are in, else "
                       "fashion-mnist");
  eval_cmd->add_option("--model", eval_model,
                       "model (quartet list models); default: the run folder's the weights are in");
  eval_cmd->add_option("--data-dir", eval_data, "dataset folder; default: the workload's");
  eval_cmd->add_option("--batch", eval_batch, "evaluation batch")->check(CLI::PositiveNumber);

  bool schema_markdown = false;
  auto* schema_cmd = app.add_subcommand("schema", "Print the experiment file's JSON Schema");
  schema_cmd->add_flag("--markdown", schema_markdown, "print the fields as a Markdown table instead");

  BenchCollectivesOptions bench_opts;
  BenchRankOptions bench_rank_opts;
  const BenchCollectivesCommands bench = add_bench_collectives_commands(app, bench_opts, bench_rank_opts);
  PhantomOptions phantom_opts;
  CLI::App* phantom_cmd = add_phantom_command(app, phantom_opts);
  PredictOptions predict_opts;
  CLI::App* predict_cmd = add_predict_command(app, predict_opts);
  SampleOptions sample_opts;
  CLI::App* sample_cmd = add_sample_command(app, sample_opts);
  ExportOptions export_opts;
  CLI::App* export_cmd = add_export_command(app, export_opts);
  InspectOptions inspect_opts;
  CLI::App* inspect_cmd = add_inspect_command(app, inspect_opts);
  TuneOptions tune_opts;
  CLI::App* tune_cmd = add_tune_command(app, tune_opts);
  PlanOptions plan_opts;
  CLI::App* plan_cmd = add_plan_command(app, plan_opts);
  CalibrateOptions calibrate_opts;
  CLI::App* calibrate_cmd = add_calibrate_command(app, calibrate_opts);

  ReportOptions report_opts;
  CLI::App* report_cmd = add_report_command(app, report_opts);

  RoleOptions role;
  auto* role_cmd = app.add_subcommand(
      "role", "Run one role of an arm: started by quartet run, or by hand on another host with --coordinator "
              "(the run's token in QUARTET_TOKEN)");
  auto* role_run_opt = role_cmd->add_option("--run-dir", role.run_dir, "run folder (a role started by quartet run)");
  role_cmd->add_option("--coordinator", role.coordinator, "HOST:PORT of the run's coordinator (a remote role)")
      ->excludes(role_run_opt);
  role_cmd->add_option("--work-dir", role.work_dir, "remote role: folder for its checkpoints and weights");
  role_cmd->add_option("--arm", role.arm, "arm name")->required();
  role_cmd->add_option("--role", role.role, "role name")->required();
  role_cmd->add_flag("--resume", role.resume, "continue from the arm's checkpoint");
  add_tls_options(*role_cmd, role.tls);

  LaunchOptions launch_opts;
  CLI::App* launch_cmd = add_launch_command(app, launch_opts);

  CertsOptions certs_opts;
  CLI::App* certs_cmd = add_certs_command(app, certs_opts);

  if (const std::string unknown = unknown_command(app, argc, argv); !unknown.empty()) {
    std::cerr << "quartet: " << unknown << "\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  try {
    engine::cpu::conv_kernel_policy();  // a bad QUARTET_CONV_KERNEL is refused before anything starts
  } catch (const std::invalid_argument& e) {
    std::cerr << "quartet: " << e.what() << "\n";
    return 2;
  }

  try {
    if (*run_cmd) {
      if (run.resume.empty() == run.spec_path.empty()) {
        std::cerr << "quartet run: give an experiment file, or --resume RUN_DIR (not both)\n";
        return 2;
      }
      if (run.progress.empty()) run.progress = "bar";
      return run_experiment(run);
    }
    if (*validate_cmd) return cmd_validate(validate_path);
    if (*list_cmd) return list_onnx.empty() ? cmd_list(list_what) : cmd_list_onnx(list_onnx);
    if (*eval_cmd) return cmd_eval(eval_weights, eval_workload, eval_model, eval_data, eval_batch);
    if (*schema_cmd) {
      if (schema_markdown) std::cout << spec_markdown();
      else std::cout << spec_json_schema().dump(2) << "\n";
      return 0;
    }
    if (*bench.bench) return bench_collectives_main(bench_opts);
    if (*phantom_cmd) return phantom_main(phantom_opts);
    if (*predict_cmd) return predict_main(predict_opts);
    if (*sample_cmd) return sample_main(sample_opts);
    if (*export_cmd) return export_main(export_opts);
    if (*inspect_cmd) return inspect_main(inspect_opts);
    if (*tune_cmd) return tune_main(tune_opts);
    if (*plan_cmd) return plan_main(plan_opts);
    if (*calibrate_cmd) return calibrate_main(calibrate_opts);
    if (*certs_cmd) return certs_main(certs_opts);
    if (*launch_cmd) return launch_main(launch_opts);
    if (*report_cmd) return report_main(report_opts, argc, argv);
    if (*bench.rank) return bench_collectives_rank_main(bench_rank_opts);
    if (*role_cmd) {
      if (role.run_dir.empty() == role.coordinator.empty()) {
        std::cerr << "quartet role: give --run-dir (started by quartet run) or --coordinator HOST:PORT\n";
        return 2;
      }
      return run_role(role);
    }
  } catch (const SpecError& e) {
    std::cerr << "quartet: " << e.what() << "\n";
    return 2;
  } catch (const InputError& e) {
    std::cerr << "quartet: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "quartet: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

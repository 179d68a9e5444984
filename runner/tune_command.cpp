#include "runner/tune_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/cpu/conv_kernel.h"
#include "engine/model.h"
#include "engine/threads.h"
#include "runner/launcher.h"
#include "runner/spec.h"
#include "runner/wiring.h"
#include "workloads/workload.h"

namespace quartet::runner {
namespace {

// The per-process batches an arm can run: the batch, per micro-batch, per rank and
// micro-batch, where its regime has those fields and they divide it; and evaluation's
// batches over the test set (whole ones and the last part).
std::set<int64_t> process_batches(const ArmSpec& arm, int64_t test_size) {
  const nlohmann::json fields = arm.regime_entry().to_json(*arm.settings);
  const int64_t micro = fields.value("micro_batches", int64_t{1});
  const int64_t ranks = fields.value("ranks", int64_t{1});
  const int64_t b = arm.train.batch;
  std::set<int64_t> out{b};
  if (micro > 0 && b % micro == 0) out.insert(b / micro);
  if (micro > 0 && ranks > 0 && b % (micro * ranks) == 0) out.insert(b / (micro * ranks));
  const int64_t eval = std::min(arm.train.eval_batch, test_size);
  if (eval > 0) out.insert(eval);
  if (eval > 0 && test_size % eval != 0) out.insert(test_size % eval);
  return out;
}

}  // namespace

CLI::App* add_tune_command(CLI::App& app, TuneOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "tune", "Measure this machine's fastest convolution kernels for a spec's arms ahead of a run (the kernel table "
              "every process reads by default; docs/engine.md)");
  cmd->add_option("spec", o.spec_path, "experiment file")->required();
  cmd->add_option("--arm", o.arm, "only this arm");
  cmd->add_flag("--again", o.again,
                "measure the spec's shapes again and replace their entries (a table measured while the machine was "
                "busy)");
  return cmd;
}

int tune_main(const TuneOptions& o) {
  if (const std::string policy = engine::cpu::conv_kernel_policy(); policy != "auto")
    throw InputError("QUARTET_CONV_KERNEL is \"" + policy + "\": quartet tune fills the table that \"auto\" (the "
                     "default) reads; unset it");
  const ExperimentSpec spec = load_spec_file(o.spec_path);
  if (!o.arm.empty()) spec.arm(o.arm);  // an arm it does not have: SpecError, exit 2
  std::cout << "kernel table: " << engine::cpu::kernel_cache_path() << "\n";
  if (o.again) engine::cpu::remeasure_kernels();
  for (const ArmSpec& arm : spec.arms) {
    if (!o.arm.empty() && arm.name != o.arm) continue;
    if (!arm.device.is_cpu()) {
      std::cout << arm.name << ": runs on " << arm.device.str() << ", nothing to tune on the CPU\n";
      continue;
    }
    const size_t before = engine::cpu::conv_kernel_choices().size();
    const int threads = arm_threads(arm);
    engine::set_compute_threads(threads);
    const std::unique_ptr<workloads::Workload> wl = load_workload(spec, arm);
    const std::shared_ptr<engine::Model> model = wl->make_model(arm.model, spec.seed);
    std::string batches;
    for (const int64_t b : process_batches(arm, wl->test_size())) {
      if (b > wl->train_size()) continue;
      std::vector<int64_t> indices(static_cast<size_t>(b));
      std::iota(indices.begin(), indices.end(), 0);
      const workloads::Batch batch = wl->train_batch(indices, 0);
      wl->loss(model->forward(batch.x), batch.y).backward();
      batches += (batches.empty() ? "" : ", ") + std::to_string(b);
    }
    const std::vector<engine::cpu::KernelChoice> choices = engine::cpu::conv_kernel_choices();
    int measured = 0, cached = 0;
    for (size_t i = before; i < choices.size(); ++i) (choices[i].source == "cache" ? cached : measured) += 1;
    std::cout << arm.name << ": " << threads << (threads == 1 ? " thread" : " threads") << ", batch " << batches
              << ": " << measured << " conv shapes measured, " << cached << " already in the table\n";
    for (size_t i = before; i < choices.size(); ++i)
      std::cout << "  " << choices[i].kernel << "  " << choices[i].shape << " (" << choices[i].source << ")\n";
  }
  return 0;
}

}  // namespace quartet::runner

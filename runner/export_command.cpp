#include "runner/export_command.h"

#include <CLI/CLI.hpp>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "engine/safetensors.h"
#include "runner/wiring.h"
#include "workloads/models.h"
#include "workloads/onnx/model.h"

namespace quartet::runner {

CLI::App* add_export_command(CLI::App& app, ExportOptions& o) {
  CLI::App* cmd = app.add_subcommand("export", "Write an arm's trained weights into the ONNX graph it imported");
  cmd->add_option("arm", o.arm_dir, "the arm's folder in a run, RUN/ARM (holding final.safetensors)")->required();
  cmd->add_option("--onnx", o.onnx, "the ONNX file to write")->required();
  return cmd;
}

int export_main(const ExportOptions& o) {
  const std::string weights = (std::filesystem::path(o.arm_dir) / "final.safetensors").string();
  if (!std::filesystem::is_regular_file(weights))
    throw InputError("arm: " + o.arm_dir + " holds no final.safetensors (the arm's folder in a finished run)");
  std::string where;
  const auto recorded = recorded_workload(weights, where);
  if (!recorded) throw InputError("arm: " + o.arm_dir + " is not an arm of a run this build can read (RUN/ARM)");
  const std::string& model = recorded->model;
  if (!workloads::onnx::is_onnx_model(model))
    throw InputError("arm: " + where + " trained the built-in model " + model +
                     "; only models imported from ONNX (\"onnx:PATH\") export to ONNX");
  const std::string source = model.substr(std::strlen(workloads::onnx::kPrefix));
  try {
    std::shared_ptr<engine::Model> m = workloads::make_model(model, 0);
    engine::load_state_dict(*m, engine::read_safetensors(weights).tensors);
    workloads::onnx::export_model(source, *m, o.onnx);
  } catch (const std::invalid_argument& e) {
    throw InputError(std::string("export: ") + e.what());
  }
  std::cout << o.onnx << ": " << model << " with the weights of " << where << "\n";
  return 0;
}

}  // namespace quartet::runner

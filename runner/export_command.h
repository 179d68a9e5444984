#pragma once

// `quartet export RUN/ARM --onnx OUT.onnx`: an arm's trained weights (its
// final.safetensors) written into the ONNX graph the arm imported ("model":
// "onnx:PATH"), so PyTorch or onnxruntime read the trained model back.

#include <string>

namespace CLI {
class App;
}

namespace quartet::runner {

struct ExportOptions {
  std::string arm_dir;  // RUN/ARM, holding final.safetensors
  std::string onnx;     // the file to write
};

// Adds the `export` subcommand to `app`, bound to `options`.
CLI::App* add_export_command(CLI::App& app, ExportOptions& options);

// Writes the file; returns 0. throws InputError (exit code 2) naming the argument for a
// folder that is not an arm of a run, an arm whose model was not imported from ONNX, or
// weights that do not load into it.
int export_main(const ExportOptions& options);

}  // namespace quartet::runner

#pragma once

// `quartet tune SPEC`: fills this machine's kernel table (engine/cpu/kernel_cache.h) for
// the convolutions a spec's arms will run, ahead of the run, so that no rank of the run
// spends its first step measuring. Each arm's model runs one forward and backward pass at
// each per-process batch the arm can use (the batch, per micro-batch, per rank and micro-
// batch) on the compute threads its processes will have.

#include <string>

namespace CLI {
class App;
}

namespace quartet::runner {

struct TuneOptions {
  std::string spec_path;
  std::string arm;     // empty: every arm
  bool again = false;  // measure the spec's shapes again, replacing what the table holds
};

CLI::App* add_tune_command(CLI::App& app, TuneOptions& options);

// Prints what was measured and what the table already held, and the table's path.
// Returns 0. throws InputError (exit 2) for a bad spec or an arm it does not have.
int tune_main(const TuneOptions& options);

}  // namespace quartet::runner

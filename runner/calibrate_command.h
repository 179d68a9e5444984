#pragma once

// `quartet calibrate [--out FILE]`: writes this machine's cluster profile (docs/plan.md)
// by timing it: the FMA peak on every core, memory bandwidth (a copy), the engine's own
// kernels for each op class (a matrix product, a convolution, causal attention, an
// elementwise op; forward and backward), and two links fitted to the α-β model from
// messages of two sizes: shared memory between threads (intra) and TCP over loopback
// (inter, what Gloo's ranks use here).

#include <string>

namespace CLI {
class App;
}

namespace quartet::runner {

struct CalibrateOptions {
  std::string out = "clusters/this-machine.json";
  bool quick = false;  // small sizes and one repetition: a valid file fast, rough figures
};

CLI::App* add_calibrate_command(CLI::App& app, CalibrateOptions& options);

// Measures, writes the file and prints what it measured. Returns 0. InputError (exit 2)
// when the file cannot be written.
int calibrate_main(const CalibrateOptions& options);

}  // namespace quartet::runner

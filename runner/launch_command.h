#pragma once

// `quartet launch`: one rank of a data_parallel or tensor_parallel arm, started once per rank by a cluster
// launcher (srun, mpirun, torchrun); the rank and the coordinator come from the
// environment (runner/cluster.h, docs/cluster.md).

#include <filesystem>
#include <string>

#include "transport/tls.h"

namespace CLI {
class App;
}

namespace quartet::runner {

struct LaunchOptions {
  std::string spec_path;
  std::string arm;
  std::filesystem::path out;         // rank 0: the run folder (must not exist); default results/<name>-<time>
  std::string coordinator;           // HOST or HOST:PORT; empty: from the environment
  std::filesystem::path token_file;  // rank 0 writes the run's token here, the others read it
  std::filesystem::path work_dir;    // ranks but 0: their checkpoints and weights
  std::string progress = "none";
  int join_timeout_s = 600;          // ranks but 0: how long to keep trying to join
  transport::TlsFiles tls;
};

CLI::App* add_launch_command(CLI::App& app, LaunchOptions& options);

// Rank 0 runs the arm as `quartet run` does (the run folder, the coordinator, role rank0)
// with the other ranks as remote roles; rank r joins as role rank<r>. Returns run's or
// role's exit code; InputError (exit 2) naming the variable or option that is wrong.
int launch_main(const LaunchOptions& options);

}  // namespace quartet::runner

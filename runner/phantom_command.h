#pragma once

// `quartet phantom`: writes seeded procedural CT or MRI phantoms and their masks as a
// Medical Segmentation Decathlon folder (medical3d/msd.h), the same cases the
// phantom-ct-seg and phantom-mri-seg workloads train on for that seed.

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace quartet::runner {

struct PhantomOptions {
  std::string kind;     // "ct" or "mri"
  int64_t count = 0;    // phantoms, >= 1
  int64_t size = 0;     // voxels per side, 32 to 256
  std::string out;      // a folder that does not exist yet, or is empty
  uint64_t seed = 1;
};

// Adds the `phantom` subcommand to `app`, bound to `options`.
CLI::App* add_phantom_command(CLI::App& app, PhantomOptions& options);

// Writes the folder and prints one line saying what it wrote. Returns 0; throws
// InputError (exit code 2) for a bad kind, count or size, or an existing non-empty
// folder, and std::runtime_error when a file cannot be written; in a build without NIfTI
// support, InputError saying what is missing.
int phantom_main(const PhantomOptions& options);

}  // namespace quartet::runner

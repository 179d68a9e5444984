#include "runner/phantom_command.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <stdexcept>

#include "runner/wiring.h"
#include "medical3d/io_support.h"
#include "medical3d/phantom.h"

#if QUARTET_WITH_MEDICAL_IO
#include "medical3d/msd.h"
#endif

namespace quartet::runner {

CLI::App* add_phantom_command(CLI::App& app, PhantomOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "phantom", "Write procedural CT or MRI phantoms with their masks in the Medical Segmentation Decathlon layout");
  cmd->add_option("--kind", o.kind, "ct or mri")->required();
  cmd->add_option("--count", o.count, "how many phantoms")->required();
  cmd->add_option("--size", o.size, "voxels per side, 32 to 256")->required();
  cmd->add_option("--out", o.out, "folder to create (must not exist, or be empty)")->required();
  cmd->add_option("--seed", o.seed, "case i is the phantom of seed phantom_case_seed(seed, i); default 1");
  return cmd;
}

int phantom_main([[maybe_unused]] const PhantomOptions& o) {
#if !QUARTET_WITH_MEDICAL_IO
  throw InputError(medical3d::no_medical_io_message("phantom"));
#else
  medical3d::PhantomKind kind;
  try {
    kind = medical3d::parse_phantom_kind(o.kind);
  } catch (const std::invalid_argument& e) {
    throw InputError(std::string("--kind: ") + e.what());
  }
  if (o.count < 1 || o.count > 100000)
    throw InputError("--count: expected 1 to 100000 phantoms, got " + std::to_string(o.count));
  if (o.size < medical3d::kMinPhantomSize || o.size > medical3d::kMaxPhantomSize)
    throw InputError("--size: expected " + std::to_string(medical3d::kMinPhantomSize) + " to " +
                     std::to_string(medical3d::kMaxPhantomSize) + " voxels per side, got " + std::to_string(o.size));
  try {
    medical3d::write_msd_dataset(o.out, kind, o.count, o.size, o.seed);
  } catch (const std::invalid_argument& e) {
    throw InputError(std::string("--out: ") + e.what());
  }
  std::cout << "wrote " << o.count << " " << medical3d::to_string(kind) << " phantom" << (o.count == 1 ? "" : "s")
            << " of " << o.size << "^3 voxels (seed " << o.seed << ") to " << o.out << "\n";
  return 0;
#endif
}

}  // namespace quartet::runner

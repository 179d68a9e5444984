#pragma once

// `quartet inspect FILE|FOLDER`: what the readers make of a NIfTI image or a DICOM series
// folder (shape, spacing, orientation, datatype, value statistics), so that a file can
// be checked before a run reads it, and the readers from outside.

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace quartet::runner {

struct InspectOptions {
  std::string path;        // a .nii or .nii.gz file, or a folder of DICOM slices
  std::string series;      // DICOM: the SeriesInstanceUID to read when the folder holds several
  int64_t max_voxels = 0;  // 0: what half of this machine's memory holds (medical3d/read_limits.h)
};

// Adds the `inspect` subcommand to `app`, bound to `options`.
CLI::App* add_inspect_command(CLI::App& app, InspectOptions& options);

// Prints the volume's description. Returns 0.
// throws InputError (exit code 2) with the reader's one-line refusal for a file or folder
// that does not read (medical3d/nifti.h and dicom.h list them), or a --max-voxels outside
// 1 to 2^30; in a build without NIfTI support, InputError saying what is missing.
int inspect_main(const InspectOptions& options);

}  // namespace quartet::runner

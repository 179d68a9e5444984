#pragma once

// `quartet predict W.safetensors VOLUME.nii.gz --out MASK.nii.gz`: segments one NIfTI
// image with trained weights, as the volume workloads evaluate (normalised as they
// normalise, sliding windows, argmax), and writes the mask as a uint8 NIfTI on the
// image's grid.

#include <cstdint>
#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace quartet::runner {

struct PredictOptions {
  std::string weights;  // safetensors of `model`
  std::string image;    // a NIfTI image (.nii or .nii.gz)
  std::string out;      // the mask to write (.nii or .nii.gz)
  std::string model = "unet3d";
  std::string kind = "ct";  // ct: windowed to the abdomen; mri: z-scored
  int64_t patch = 32;       // voxels per side of a window, as the model was trained
  int64_t batch = 4;        // windows per forward pass
  double overlap = 0.5;
  int64_t max_voxels = 0;   // the most voxels the image may have; 0: what half of this machine's memory holds
  std::optional<double> nan_as;  // voxels that are NaN or infinite read as this; unset: refused
};

// Adds the `predict` subcommand to `app`, bound to `options`.
CLI::App* add_predict_command(CLI::App& app, PredictOptions& options);

// Writes the mask and prints one line: its size and voxels per class. Returns 0.
// throws InputError (exit code 2) naming the argument for a model that does not segment
// volumes, a bad kind, patch, batch, overlap, max_voxels or nan_as, weights that do not
// load into the model (or hold values that are not finite), an image that does not read
// or holds voxels that are not finite (unless nan_as), or an output name that is not
// .nii/.nii.gz or whose folder is missing or not writable (checked before inference), or
// that cannot be written; in a build without NIfTI support, InputError saying what is
// missing.
int predict_main(const PredictOptions& options);

}  // namespace quartet::runner

#include "runner/predict_command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <vector>
#include <stdexcept>

#include "engine/safetensors.h"
#include "runner/wiring.h"
#include "medical3d/io_support.h"
#include "medical3d/phantom.h"
#include "workloads/models.h"
#include "workloads/segmentation.h"

#if QUARTET_WITH_MEDICAL_IO
#include "medical3d/nifti.h"
#endif

namespace quartet::runner {
namespace {

#if QUARTET_WITH_MEDICAL_IO
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool nifti_name(const std::string& path) { return ends_with(path, ".nii") || ends_with(path, ".nii.gz"); }

// The folder `path` goes into exists and takes files: checked before any inference.
void check_writable_folder(const std::string& path) {
  std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (folder.empty()) folder = ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec))
    throw InputError("--out: the folder " + folder.string() + " of " + path + " does not exist; make it first");
  if (::access(folder.c_str(), W_OK) != 0)
    throw InputError("--out: cannot write into " + folder.string() + ": " + std::strerror(errno));
}

#endif

}  // namespace

CLI::App* add_predict_command(CLI::App& app, PredictOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "predict", "Segment a NIfTI volume with trained weights (sliding windows) and write the mask as NIfTI");
  cmd->add_option("weights", o.weights, "weights (safetensors), e.g. a run's final.safetensors")->required();
  cmd->add_option("volume", o.image, "the image (.nii or .nii.gz)")->required();
  cmd->add_option("--out", o.out, "the mask to write (.nii or .nii.gz, uint8, the image's grid)")->required();
  cmd->add_option("--model", o.model, "the model the weights are for; default unet3d");
  cmd->add_option("--kind", o.kind, "ct (windowed to the abdomen, 40/400 HU) or mri (z-scored); default ct");
  cmd->add_option("--patch", o.patch, "voxels per side of a window, as trained; default 32");
  cmd->add_option("--batch", o.batch, "windows per forward pass; default 4");
  cmd->add_option("--overlap", o.overlap, "fraction of a window shared with the next, in [0, 1); default 0.5");
  cmd->add_option("--max-voxels", o.max_voxels,
                  "the most voxels the image may have, 1 to 2^30; default: what half of this machine's memory "
                  "holds at what predict needs a voxel (16 bytes and 4 a class)");
  cmd->add_option("--nan-as", o.nan_as,
                  "read voxels that are NaN or infinite as this value; default: such an image is refused");
  return cmd;
}

int predict_main([[maybe_unused]] const PredictOptions& o) {
#if !QUARTET_WITH_MEDICAL_IO
  throw InputError(medical3d::no_medical_io_message("predict"));
#else
  // Every argument is checked before the image is read or the model built.
  try {
    workloads::check_model_name(o.model);
  } catch (const std::invalid_argument& e) {
    throw InputError(std::string("--model: ") + e.what());
  }
  if (workloads::model_task(o.model) != workloads::kVolumeSegmentation)
    throw InputError("--model: " + o.model + " does not segment volumes (it is " + workloads::model_task(o.model) +
                     "); use unet3d");
  medical3d::PhantomKind kind;
  try {
    kind = medical3d::parse_phantom_kind(o.kind);
  } catch (const std::invalid_argument& e) {
    throw InputError(std::string("--kind: ") + e.what());
  }
  const int64_t multiple = workloads::spatial_multiple(o.model);
  if (o.patch < 1 || o.patch > 1024 || o.patch % multiple != 0)
    throw InputError("--patch: expected 1 to 1024 voxels and, for " + o.model + ", a multiple of " +
                     std::to_string(multiple) + ", got " + std::to_string(o.patch));
  if (o.batch < 1) throw InputError("--batch: expected at least 1 window, got " + std::to_string(o.batch));
  if (!(o.overlap >= 0.0 && o.overlap < 1.0))
    throw InputError("--overlap: expected a fraction in [0, 1), got " + std::to_string(o.overlap));
  try {
    if (o.max_voxels != 0) (void)medical3d::ReadLimits::at_most(o.max_voxels, "--max-voxels");
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
  if (o.nan_as && !std::isfinite(*o.nan_as))
    throw InputError("--nan-as: expected a finite value, got " + std::to_string(*o.nan_as));
  if (!nifti_name(o.out)) throw InputError("--out: expected a name ending in .nii or .nii.gz, got \"" + o.out + "\"");
  check_writable_folder(o.out);
  if (!nifti_name(o.image))
    throw InputError(o.image + ": expected a NIfTI image, a name ending in .nii or .nii.gz");

  engine::NamedTensors weights;
  try {
    weights = engine::read_safetensors(o.weights).tensors;
  } catch (const std::exception& e) {
    throw InputError(o.weights + ": " + e.what());
  }
  std::shared_ptr<engine::Model> model;
  int classes = workloads::model_info(o.model).num_classes;
  try {
    // unet3d trained on a Decathlon task has that task's classes: its head says how many.
    for (const auto& [name, t] : weights)
      if (o.model == "unet3d" && name == "head.0.bias" && t.dim() == 1) classes = static_cast<int>(t.numel());
    model = workloads::make_model(o.model, 0, classes);
    engine::load_state_dict(*model, weights);
  } catch (const engine::StateDictMismatch& e) {
    throw InputError(o.weights + ": " + e.brief() + "; are these weights of --model " + o.model + "?");
  } catch (const std::exception& e) {
    throw InputError(o.weights + ": " + e.what());
  }
  // The image is read only when what predict needs for it fits (it depends on the classes).
  medical3d::Volume image;
  try {
    const medical3d::ReadLimits limits = medical3d::ReadLimits::from_option(
        o.max_voxels, "--max-voxels", medical3d::predict_bytes_per_voxel(classes));
    image = medical3d::read_nifti(o.image, limits);
  } catch (const std::exception& e) {
    throw InputError(e.what());
  }
  if (const int64_t bad = medical3d::non_finite_voxels(image); bad > 0) {
    if (!o.nan_as)
      throw InputError(o.image + ": " + std::to_string(bad) + " of " + std::to_string(image.grid.voxel_count()) +
                       " voxels are not finite (NaN or infinite); allowed: finite voxels, or --nan-as VALUE to "
                       "read them as VALUE");
    medical3d::replace_non_finite(image, static_cast<float>(*o.nan_as));
  }
  image = workloads::normalise_image(kind, image);  // the image as read is not kept beside it
  const medical3d::LabelVolume mask = workloads::segment_volume(*model, image, o.patch, o.overlap, o.batch);
  try {
    medical3d::write_nifti(o.out, mask);
  } catch (const std::exception& e) {
    throw InputError(std::string("--out: ") + e.what());
  }
  const std::array<int64_t, 256> counts = medical3d::class_counts(mask);
  std::cout << "wrote " << o.out << ": " << mask.nx() << "x" << mask.ny() << "x" << mask.nz() << " voxels;";
  for (int c = 0; c < 256; ++c)
    if (counts[static_cast<size_t>(c)] > 0) std::cout << " class " << c << ": " << counts[static_cast<size_t>(c)];
  std::cout << "\n";
  return 0;
#endif
}

}  // namespace quartet::runner

#include "runner/inspect_command.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "runner/wiring.h"
#include "medical3d/io_support.h"
#include "medical3d/read_limits.h"
#include "medical3d/volume.h"

#if QUARTET_WITH_MEDICAL_IO
#include "medical3d/dicom.h"
#include "medical3d/nifti.h"
#endif

namespace quartet::runner {
namespace {

#if QUARTET_WITH_MEDICAL_IO
std::string num(double v) { return medical3d::header_number_text(v, 6); }

// Minimum, maximum, mean and standard deviation of the finite voxels; NaN and infinite
// ones are counted apart.
struct ValueStats {
  double min = 0, max = 0, mean = 0, std = 0;
  int64_t finite = 0, non_finite = 0;
};

ValueStats value_stats(const medical3d::Volume& v) {
  ValueStats s;
  s.min = std::numeric_limits<double>::infinity();
  s.max = -s.min;
  double sum = 0, sum2 = 0;
  for (const float f : v.voxels) {
    if (!std::isfinite(f)) {
      ++s.non_finite;
      continue;
    }
    const double x = f;
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
    sum += x;
    sum2 += x * x;
    ++s.finite;
  }
  if (s.finite == 0) return ValueStats{0, 0, 0, 0, 0, s.non_finite};
  s.mean = sum / static_cast<double>(s.finite);
  s.std = std::sqrt(std::max(0.0, sum2 / static_cast<double>(s.finite) - s.mean * s.mean));
  return s;
}

// The anatomical direction each index axis points to most (LPS+: x towards L, y towards
// P, z towards S; negative: R, A, I), e.g. "LPS", "RAS".
std::string orientation_code(const medical3d::Grid& g, bool& oblique) {
  std::string code;
  oblique = false;
  for (int c = 0; c < 3; ++c) {
    int best = 0;
    for (int r = 1; r < 3; ++r)
      if (std::abs(g.direction[3 * r + c]) > std::abs(g.direction[3 * best + c])) best = r;
    const double d = g.direction[3 * best + c];
    code += d > 0 ? "LPS"[best] : "RAI"[best];
    if (std::abs(d) < 1 - 1e-6) oblique = true;
  }
  return code;
}

void print_grid(const medical3d::Grid& g) {
  bool oblique = false;
  const std::string code = orientation_code(g, oblique);
  std::cout << "  shape        " << g.nx() << " x " << g.ny() << " x " << g.nz() << " voxels (x, y, z), "
            << g.voxel_count() << " in all\n"
            << "  spacing      " << num(g.spacing[0]) << " x " << num(g.spacing[1]) << " x " << num(g.spacing[2])
            << " mm\n"
            << "  origin       " << num(g.origin[0]) << ", " << num(g.origin[1]) << ", " << num(g.origin[2])
            << " mm (LPS)\n"
            << "  orientation  " << code << (oblique ? " (nearest: the axes are oblique)" : "")
            << "; direction columns x, y, z:";
  for (int r = 0; r < 3; ++r)
    std::cout << (r ? " /" : "") << " " << num(g.direction[3 * r]) << " " << num(g.direction[3 * r + 1]) << " "
              << num(g.direction[3 * r + 2]);
  std::cout << "\n";
}

void print_values(const medical3d::Volume& v, const std::string& unit) {
  const ValueStats s = value_stats(v);
  std::cout << "  values       ";
  if (s.finite == 0)
    std::cout << "no finite voxel";
  else
    std::cout << "min " << num(s.min) << ", max " << num(s.max) << ", mean " << num(s.mean) << ", std " << num(s.std)
              << unit;
  if (s.non_finite > 0) std::cout << "; " << s.non_finite << " voxels are NaN or infinite";
  std::cout << "\n";
}

const char* xform_name(int code) {
  switch (code) {
    case 1: return "scanner";
    case 2: return "aligned";
    case 3: return "Talairach";
    case 4: return "MNI";
    default: return "unknown";
  }
}

void inspect_nifti(const std::string& path, const medical3d::ReadLimits& limits) {
  const medical3d::NiftiImage im = medical3d::read_nifti_image(path, limits);
  std::cout << path << ": NIfTI-" << im.version << " image" << (im.gzipped ? ", gzipped" : "") << "\n";
  print_grid(im.volume.grid);
  std::cout << "  datatype     " << im.datatype << " (" << im.bytes_per_voxel << " bytes a voxel), scl_slope "
            << num(im.scl_slope) << ", scl_inter " << num(im.scl_inter) << "\n"
            << "  geometry     from the " << im.affine;
  if (im.affine == "sform") std::cout << " (sform_code " << im.sform_code << ", " << xform_name(im.sform_code) << ")";
  if (im.affine == "qform") std::cout << " (qform_code " << im.qform_code << ", " << xform_name(im.qform_code) << ")";
  std::cout << "\n";
  if (!im.description.empty()) std::cout << "  description  " << im.description << "\n";
  print_values(im.volume, "");
}

void inspect_dicom(const std::string& folder, const std::string& series, const medical3d::ReadLimits& limits) {
  const medical3d::DicomSeries s = medical3d::read_dicom_series(folder, series, limits);
  const bool hu = s.modality == "CT";
  std::cout << folder << ": DICOM series " << s.series_uid << " (" << (s.modality.empty() ? "no Modality" : s.modality)
            << "), " << s.files.size() << (s.files.size() == 1 ? " slice" : " slices") << "\n";
  print_grid(s.volume.grid);
  std::cout << "  datatype     " << s.datatype << " stored values"
            << (s.rescaled ? ", times RescaleSlope plus RescaleIntercept" : "") << "\n";
  for (const std::string& note : s.notes) std::cout << "  note         " << note << "\n";
  print_values(s.volume, hu ? " (HU)" : "");
}
#endif

}  // namespace

CLI::App* add_inspect_command(CLI::App& app, InspectOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Show a NIfTI image's or a DICOM series' shape, spacing, orientation, datatype and values");
  cmd->add_option("path", o.path, "a .nii or .nii.gz file, or a folder of one DICOM series' slices")->required();
  cmd->add_option("--series", o.series, "DICOM: the SeriesInstanceUID to read when the folder holds several");
  cmd->add_option("--max-voxels", o.max_voxels,
                  "the most voxels the image may have, 1 to 2^30; default: what half of this machine's memory "
                  "holds at 32 bytes a voxel");
  return cmd;
}

int inspect_main([[maybe_unused]] const InspectOptions& o) {
#if !QUARTET_WITH_MEDICAL_IO
  throw InputError(medical3d::no_medical_io_message("inspect"));
#else
  medical3d::ReadLimits limits;
  try {
    limits = medical3d::ReadLimits::from_option(o.max_voxels, "--max-voxels");
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
  std::error_code ec;
  const bool folder = std::filesystem::is_directory(o.path, ec);
  if (!folder && !o.series.empty()) throw InputError("--series: only for a DICOM folder; " + o.path + " is not one");
  try {
    if (folder)
      inspect_dicom(o.path, o.series, limits);
    else
      inspect_nifti(o.path, limits);
  } catch (const std::runtime_error& e) {
    throw InputError(e.what());
  }
  return 0;
#endif
}

}  // namespace quartet::runner

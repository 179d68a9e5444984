#pragma once

// NIfTI-1 and NIfTI-2 single files (https://nifti.nimh.nih.gov), plain (.nii) or gzipped
// (.nii.gz), through libnifti2.
//
// NIfTI world coordinates are RAS+; a Volume's are LPS+ (volume.h). The reader negates x
// and y of the file's affine, the writer negates them back, so a round trip keeps the
// geometry.

#include <string>

#include "medical3d/volume.h"

namespace quartet::medical3d {

struct NiftiWriteOptions {
  bool nifti2 = false;  // write a NIfTI-2 header (540 bytes, 64-bit sizes, double affine)
};

// Reads a 3D NIfTI image, which may come from anywhere.
// requires `path` to end in .nii or .nii.gz
// ensures
//   - either byte order and either NIfTI version; voxels of any real datatype (u)int8/16/
//     32/64, float32/64 are converted to float, with scl_slope/scl_inter applied when
//     scl_slope is finite and non-zero (as the standard says)
//   - the geometry comes from the sform when sform_code > 0, else from the qform (or,
//     when neither is set, from pixdim alone); spacing is the length of each column of
//     the affine, direction the column divided by it, origin its translation
//   - 1D and 2D images read as volumes one voxel thick
//   - memory allocated is bounded by the file: a plain file must hold every byte its
//     header promises before the voxels are read; a gzipped one may promise at most what
//     deflate can expand it to (1032x)
// throws std::runtime_error naming the path and what is wrong: a missing file, a name
// without .nii/.nii.gz, a file that is not NIfTI, a truncated header or voxel data, an
// image with more than 3 dimensions (a 4D series with t > 1), a complex or RGB datatype,
// a degenerate affine, more than kMaxVoxels voxels.
Volume read_nifti(const std::string& path);

// read_nifti, then to_labels: a segmentation mask whose voxels are class indices.
// throws std::runtime_error naming the path when a voxel is not an integer in [0, 255].
LabelVolume read_nifti_labels(const std::string& path);

// Writes `volume` as float32 (an image) or `labels` as uint8 (a mask) to `path`, replacing
// any file there; gzipped when `path` ends in .nii.gz, plain when it ends in .nii.
// ensures
//   - the sform and the qform both hold the grid (code 1, scanner anatomical), pixdim the
//     spacing, xyz units mm; scl_slope 1, scl_inter 0
//   - in the host's byte order
//   - atomic: written to a temporary name beside `path`, then renamed onto it
// throws std::invalid_argument when the name does not end in .nii/.nii.gz, the grid fails
// check_grid or the voxel count does not match it; std::runtime_error naming the path when
// the file cannot be written.
void write_nifti(const std::string& path, const Volume& volume, const NiftiWriteOptions& options = {});
void write_nifti(const std::string& path, const LabelVolume& labels, const NiftiWriteOptions& options = {});

}  // namespace quartet::medical3d

#pragma once

// NIfTI-1 and NIfTI-2 single files (https://nifti.nimh.nih.gov), plain (.nii) or gzipped
// (.nii.gz), through libnifti2.
//
// NIfTI world coordinates are RAS+; a Volume's are LPS+ (volume.h). The reader negates x
// and y of the file's affine, the writer negates them back, so a round trip keeps the
// geometry.

#include <string>

#include "medical3d/read_limits.h"
#include "medical3d/volume.h"

namespace quartet::medical3d {

struct NiftiWriteOptions {
  bool nifti2 = false;  // write a NIfTI-2 header (540 bytes, 64-bit sizes, double affine)
};

// At most this many bytes of header extensions may stand between the header and the
// voxels (vox_offset - the header's size): a .nii.gz is decompressed from its start, so
// a larger vox_offset would be a decompression bomb of its own.
inline constexpr int64_t kMaxNiftiExtensionBytes = int64_t{64} << 20;

// A NIfTI image and what its header says about the voxels (`quartet inspect` prints it).
struct NiftiImage {
  Volume volume;
  int version = 1;           // NIfTI-1 or NIfTI-2
  bool gzipped = false;      // read from a .nii.gz
  std::string datatype;      // the voxels as stored, in libnifti's names lower-cased: "int16", "float32"
  int bytes_per_voxel = 0;
  std::string affine;        // where the grid came from: "sform", "qform" or "pixdim"
  int qform_code = 0, sform_code = 0;   // NIFTI_XFORM_*: 0 unknown, 1 scanner, 2 aligned, 3 Talairach, 4 MNI
  double scl_slope = 1, scl_inter = 0;  // as applied: 1 and 0 when the file is unscaled
  std::string description;   // the header's descrip
};

// Reads a 3D NIfTI image, which may come from anywhere: its header is untrusted input.
// requires `path` to end in .nii or .nii.gz
// ensures
//   - either byte order and either NIfTI version; voxels of any real datatype (u)int8/16/
//     32/64, float32/64 are converted to float, with scl_slope/scl_inter applied when
//     scl_slope is finite and non-zero (as the standard says)
//   - the geometry comes from the sform when sform_code > 0, else from the qform (or,
//     when neither is set, from pixdim alone); spacing is the length of each column of
//     the affine, direction the column divided by it, origin its translation
//   - 1D and 2D images read as volumes one voxel (of 1 mm) thick
//   - every field the voxels or the grid depend on is checked before anything is
//     allocated or read, and libnifti's quiet repairs never apply: a spacing of 0 stays
//     an error, not 1 mm
//   - memory and work are bounded by the file and by `limits`: a plain file must
//     hold every byte its header promises before the voxels are read; a gzipped one may
//     promise at most what deflate can expand it to (1032x), is decompressed no further
//     than the header's promise, and memory grows with what it really holds
// throws std::runtime_error, one line naming the path, the field, what it holds and what
// is allowed: a missing file, a name without .nii/.nii.gz, a file that is not NIfTI, a
// magic other than "n+1"/"n+2" (a .hdr/.img pair), a truncated header or voxel data,
// dim[0] outside 1..7, a size < 1, more than 3 dimensions (a 4D series with t > 1), more
// than limits.max_voxels voxels, a complex, RGB or unknown datatype, a pixdim[1..3] that is
// not a finite spacing > 0, a non-finite qform or sform that is in use, a vox_offset that
// is not a whole number of bytes from the header's end up to kMaxNiftiExtensionBytes
// more, or past the end of the file, a degenerate affine.
NiftiImage read_nifti_image(const std::string& path, const ReadLimits& limits = ReadLimits::of_this_machine());

// read_nifti_image's volume.
Volume read_nifti(const std::string& path, const ReadLimits& limits = ReadLimits::of_this_machine());

// read_nifti, then to_labels: a segmentation mask whose voxels are class indices.
// throws std::runtime_error naming the path when a voxel is not an integer in [0, 255].
LabelVolume read_nifti_labels(const std::string& path, const ReadLimits& limits = ReadLimits::of_this_machine());

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

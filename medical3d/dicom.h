#pragma once

// A DICOM series (a folder of single-frame CT or MR slices) as one volume, through DCMTK.
// DCMTK has no series reader; this one groups by SeriesInstanceUID, checks that the
// slices describe one grid, and stacks them along the slice normal.

#include <string>
#include <vector>

#include "medical3d/read_limits.h"
#include "medical3d/volume.h"

namespace quartet::medical3d {

struct DicomSeries {
  Volume volume;                   // Hounsfield units for CT (stored value * slope + intercept)
  std::string series_uid;          // the SeriesInstanceUID read
  std::vector<std::string> files;  // the slices' paths, in volume order (z = 0 first)
  std::vector<std::string> notes;  // files in the folder that were skipped, and why
  std::string modality;            // the first slice's Modality ("CT", "MR"), empty when absent
  std::string datatype;            // stored values: "int16", "uint16", "int8" or "uint8"
  bool rescaled = false;           // a slice has a RescaleSlope other than 1 or an intercept other than 0
};

// Reads the slices of one series from `folder` (not its subfolders).
// requires
//   - `series_uid` names the series when the folder holds more than one
// ensures
//   - files that are not DICOM, have no pixel data (a DICOMDIR, a report) or no
//     SeriesInstanceUID are skipped, each with a line in `notes`
//   - slices are sorted by ImagePositionPatient projected on the slice normal
//     (row cosine x column cosine from ImageOrientationPatient), ascending
//   - the grid (LPS, volume.h): x along the rows (the row cosine), y down the columns,
//     z along the normal; spacing x = PixelSpacing[1] (between columns), y =
//     PixelSpacing[0] (between rows), z = the gap between consecutive positions (for a
//     single slice: SliceThickness, else 1 mm); origin = the first slice's position
//   - voxels = stored value * RescaleSlope + RescaleIntercept, per slice, with the slope 1
//     and the intercept 0 when absent; stored values are 8- or 16-bit, unsigned or two's
//     complement as PixelRepresentation says, masked to BitsStored
//   - the slices' headers are read and checked, the voxel count included, before any
//     pixel data is read or the volume allocated
// throws std::runtime_error naming the folder or the slice file and what is wrong: no
// such folder, no DICOM image in it, several series and no (or an unknown) `series_uid`
// (listing the UIDs and their slice counts), a slice whose Rows, Columns, PixelSpacing,
// ImageOrientationPatient, BitsAllocated or PixelRepresentation disagree with the first
// one's, a missing geometry tag, two slices at the same position, uneven gaps between
// positions (a missing slice), slices not stacked along the normal (gantry tilt),
// compressed or multi-frame or colour pixel data, pixel data shorter than Rows x Columns,
// a PixelSpacing or SliceThickness that is not finite and > 0, more voxels than
// limits.max_voxels.
DicomSeries read_dicom_series(const std::string& folder, const std::string& series_uid = {},
                              const ReadLimits& limits = ReadLimits::of_this_machine());

}  // namespace quartet::medical3d

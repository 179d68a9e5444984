#pragma once

// NIfTI and DICOM files (nifti.h, dicom.h and msd.h, the quartet_medical3d_io library)
// need libnifti2 and DCMTK, so CMake builds them only when it finds both
// (QUARTET_MEDICAL_IO). Code that reads or writes those files compiles under
// QUARTET_WITH_MEDICAL_IO, which linking quartet_medical3d_io defines; without it, asking
// for that code fails with this message.

#include <cstdio>
#include <string>

namespace quartet::medical3d {

// "<feature> needs Quartet built with NIfTI support (apt install …, then rebuild)".
inline std::string no_medical_io_message(const std::string& feature) {
  return feature + " needs Quartet built with NIfTI support (apt install libnifti2-dev libdcmtk-dev, then rebuild)";
}

// A number from a file's header as a refusal shows it, to a float's precision by default:
// "1e+12", "352.5", "nan".
inline std::string header_number_text(double v, int digits = 7) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

}  // namespace quartet::medical3d

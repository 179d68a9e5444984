#pragma once

// NIfTI and DICOM files (nifti.h, dicom.h and msd.h, the quartet_medical3d_io library)
// need libnifti2 and DCMTK, so CMake builds them only when it finds both
// (QUARTET_MEDICAL_IO). Code that reads or writes those files compiles under
// QUARTET_WITH_MEDICAL_IO, which linking quartet_medical3d_io defines; without it, asking
// for that code fails with this message.

#include <string>

namespace quartet::medical3d {

// "<feature> needs Quartet built with NIfTI support (apt install …, then rebuild)".
inline std::string no_medical_io_message(const std::string& feature) {
  return feature + " needs Quartet built with NIfTI support (apt install libnifti2-dev libdcmtk-dev, then rebuild)";
}

}  // namespace quartet::medical3d

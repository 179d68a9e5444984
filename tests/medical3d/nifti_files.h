#pragma once

// NIfTI files as other tools (or an attacker) write them, for the tests that read them:
// images written by libnifti directly, and headers patched byte for byte.

#include <gtest/gtest.h>
#include <nifti2_io.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/medical3d/test_dir.h"

namespace quartet::medical3d::testing {

// Writes an image with libnifti directly, as another tool would: `setup` fills the
// voxels (nim.data, zeroed) and any header fields.
inline void write_with_libnifti(const std::string& path, std::vector<int64_t> dims, int datatype,
                                const std::function<void(nifti_image&)>& setup) {
  int64_t d[8] = {static_cast<int64_t>(dims.size()), 1, 1, 1, 1, 1, 1, 1};
  for (size_t i = 0; i < dims.size(); ++i) d[i + 1] = dims[i];
  nifti_image* nim = nifti_make_new_nim(d, datatype, 1);
  ASSERT_NE(nim, nullptr);
  setup(*nim);
  free(nim->fname);
  free(nim->iname);
  nim->fname = nifti_strdup(path.c_str());
  nim->iname = nifti_strdup(path.c_str());
  nim->nifti_type = NIFTI_FTYPE_NIFTI1_1;
  nifti_set_iname_offset(nim, 1);
  nifti_image_write(nim);
  nifti_image_free(nim);
}

// The header at the start of a file's bytes; a zeroed one, and a failure, when it is shorter.
template <class Header>
Header header_of(const std::string& bytes) {
  Header h{};
  if (bytes.size() < sizeof h)
    ADD_FAILURE() << "a file of " << bytes.size() << " bytes holds no " << sizeof h << "-byte header";
  else
    std::memcpy(&h, bytes.data(), sizeof h);
  return h;
}

// `bytes` (a NIfTI-1 file in the host's byte order) with its header changed by `patch`.
inline std::string patched_nifti1(std::string bytes, const std::function<void(nifti_1_header&)>& patch) {
  nifti_1_header h = header_of<nifti_1_header>(bytes);
  EXPECT_EQ(h.sizeof_hdr, 348) << "not a NIfTI-1 header in the host's byte order";
  patch(h);
  std::memcpy(bytes.data(), &h, sizeof h);
  return bytes;
}

// Writes `bytes` to `path` gzipped, as a .nii.gz holds them.
inline void write_gzipped(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// A gzip bomb: `header` (352 bytes of a NIfTI-1 header) followed by `voxels` zero bytes,
// gzipped at the highest level, so that a file of a few hundred KB claims what it says.
inline void write_gzip_bomb(const std::string& path, const std::string& header, int64_t voxels) {
  gzFile f = gzopen(path.c_str(), "wb9");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, header.data(), static_cast<unsigned>(header.size())), static_cast<int>(header.size()));
  const std::string zeros(1 << 20, '\0');
  for (int64_t left = voxels; left > 0; left -= static_cast<int64_t>(zeros.size()))
    ASSERT_GT(gzwrite(f, zeros.data(), static_cast<unsigned>(std::min<int64_t>(left, zeros.size()))), 0);
  ASSERT_EQ(gzclose(f), Z_OK);
}

}  // namespace quartet::medical3d::testing

#include "medical3d/nifti.h"

#include <nifti2_io.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

namespace quartet::medical3d {
namespace {

namespace fs = std::filesystem;

constexpr int kNifti1HeaderBytes = 348;
constexpr int kNifti2HeaderBytes = 540;
// Deflate expands at most 1032-fold; the slack covers gzip framing on tiny files.
constexpr uint64_t kMaxDeflateRatio = 1032;
constexpr uint64_t kGzipSlackBytes = 1 << 16;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_gz_name(const std::string& path) { return ends_with(path, ".nii.gz"); }
bool is_nifti_name(const std::string& path) { return ends_with(path, ".nii") || is_gz_name(path); }

struct NimDeleter {
  void operator()(nifti_image* nim) const { nifti_image_free(nim); }
};
using NimPtr = std::unique_ptr<nifti_image, NimDeleter>;

uint32_t bswap32(uint32_t v) { return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24); }

// Reads the first bytes (decompressed for .nii.gz) and checks sizeof_hdr, in either byte
// order, before libnifti sees the file: its own errors are terse and go to stderr.
void check_header_bytes(const std::string& path) {
  uint8_t head[kNifti2HeaderBytes];
  int got = 0;
  if (is_gz_name(path)) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
    got = gzread(f, head, sizeof head);
    gzclose(f);
    if (got < 0) fail(path, "corrupt gzip data in the header");
  } else {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
    got = static_cast<int>(std::fread(head, 1, sizeof head, f));
    std::fclose(f);
  }
  if (got < 4) fail(path, "truncated: " + std::to_string(got) + " bytes, not even a NIfTI header size");
  uint32_t size;
  std::memcpy(&size, head, 4);
  if (size != kNifti1HeaderBytes && size != kNifti2HeaderBytes) size = bswap32(size);
  if (size != kNifti1HeaderBytes && size != kNifti2HeaderBytes) {
    const bool gzipped = head[0] == 0x1f && head[1] == 0x8b;
    fail(path, std::string("not a NIfTI file: sizeof_hdr is neither 348 (NIfTI-1) nor 540 (NIfTI-2) in either "
                           "byte order") +
                   (gzipped ? "; the file is gzip-compressed: name it *.nii.gz" : ""));
  }
  if (got < static_cast<int>(size))
    fail(path, "truncated: " + std::to_string(got) + " bytes, shorter than its " + std::to_string(size) +
                   "-byte NIfTI-" + (size == kNifti1HeaderBytes ? "1" : "2") + " header");
}

// Only real scalar types convert to float; the others have no single value per voxel.
bool is_supported_datatype(int dt) {
  switch (dt) {
    case DT_UINT8:
    case DT_INT8:
    case DT_UINT16:
    case DT_INT16:
    case DT_UINT32:
    case DT_INT32:
    case DT_UINT64:
    case DT_INT64:
    case DT_FLOAT32:
    case DT_FLOAT64:
      return true;
    default:
      return false;
  }
}

template <class T>
void convert(const void* src, int64_t n, double slope, double inter, float* dst) {
  const T* p = static_cast<const T*>(src);
  if (slope == 1.0 && inter == 0.0) {
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(p[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(static_cast<double>(p[i]) * slope + inter);
  }
}

void convert_any(int dt, const void* src, int64_t n, double slope, double inter, float* dst) {
  switch (dt) {
    case DT_UINT8:
      return convert<uint8_t>(src, n, slope, inter, dst);
    case DT_INT8:
      return convert<int8_t>(src, n, slope, inter, dst);
    case DT_UINT16:
      return convert<uint16_t>(src, n, slope, inter, dst);
    case DT_INT16:
      return convert<int16_t>(src, n, slope, inter, dst);
    case DT_UINT32:
      return convert<uint32_t>(src, n, slope, inter, dst);
    case DT_INT32:
      return convert<int32_t>(src, n, slope, inter, dst);
    case DT_UINT64:
      return convert<uint64_t>(src, n, slope, inter, dst);
    case DT_INT64:
      return convert<int64_t>(src, n, slope, inter, dst);
    case DT_FLOAT32:
      return convert<float>(src, n, slope, inter, dst);
    case DT_FLOAT64:
      return convert<double>(src, n, slope, inter, dst);
    default:
      throw std::logic_error("convert_any: unchecked datatype");
  }
}

// The grid of a 4x4 RAS affine: LPS = diag(-1, -1, 1) * RAS.
Grid grid_from_affine(const nifti_dmat44& m, const Dims3& dims, const std::string& path, const char* source) {
  Grid g;
  g.dims = dims;
  const double flip[3] = {-1, -1, 1};
  for (int c = 0; c < 3; ++c) {
    double norm2 = 0;
    for (int r = 0; r < 3; ++r) norm2 += m.m[r][c] * m.m[r][c];
    const double norm = std::sqrt(norm2);
    if (!(norm > 0) || !std::isfinite(norm))
      fail(path, std::string("degenerate ") + source + ": column " + std::to_string(c) + " of its affine has length " +
                     std::to_string(norm) + ", so voxel spacing is undefined");
    g.spacing[c] = norm;
    for (int r = 0; r < 3; ++r) g.direction[3 * r + c] = flip[r] * m.m[r][c] / norm;
  }
  for (int r = 0; r < 3; ++r) g.origin[r] = flip[r] * m.m[r][3];
  try {
    check_grid(g, source);
  } catch (const std::invalid_argument& e) {
    fail(path, e.what());
  }
  return g;
}

std::string dims_text(const nifti_image& nim) {
  std::string s;
  for (int64_t d = 1; d <= std::min<int64_t>(nim.dim[0], 7); ++d) {
    if (d > 1) s += 'x';
    s += std::to_string(nim.dim[d]);
  }
  return s;
}

// The bytes before the voxels of a single-file NIfTI image on `grid`: the header, the
// 4-byte extender (no extensions) and zero padding up to vox_offset. libnifti fills the
// header (the qform quaternion, the magic); its own writer picks NIfTI-2 only when
// NIfTI-1 cannot hold the sizes, so the bytes are written here.
std::string header_bytes(const Grid& grid, int datatype, bool nifti2, const std::string& path) {
  const int64_t dims[8] = {3, grid.dims[0], grid.dims[1], grid.dims[2], 1, 1, 1, 1};
  NimPtr nim(nifti_make_new_nim(dims, datatype, 0));
  if (!nim) fail(path, "libnifti could not make a header");

  // LPS grid -> RAS affine.
  const double flip[3] = {-1, -1, 1};
  nifti_dmat44 m{};
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) m.m[r][c] = flip[r] * grid.direction[3 * r + c] * grid.spacing[c];
    m.m[r][3] = flip[r] * grid.origin[r];
  }
  m.m[3][3] = 1;
  nim->sform_code = NIFTI_XFORM_SCANNER_ANAT;
  nim->sto_xyz = m;
  double dx, dy, dz;
  nifti_dmat44_to_quatern(m, &nim->quatern_b, &nim->quatern_c, &nim->quatern_d, &nim->qoffset_x, &nim->qoffset_y,
                          &nim->qoffset_z, &dx, &dy, &dz, &nim->qfac);
  nim->qform_code = NIFTI_XFORM_SCANNER_ANAT;
  nim->dx = nim->pixdim[1] = grid.spacing[0];
  nim->dy = nim->pixdim[2] = grid.spacing[1];
  nim->dz = nim->pixdim[3] = grid.spacing[2];
  nim->xyz_units = NIFTI_UNITS_MM;
  nim->scl_slope = 1;
  nim->scl_inter = 0;
  std::snprintf(nim->descrip, sizeof nim->descrip, "quartet medical3d");
  nim->nifti_type = nifti2 ? NIFTI_FTYPE_NIFTI2_1 : NIFTI_FTYPE_NIFTI1_1;
  // Header + extender, rounded up to 16 bytes as the standard recommends: 352 or 544.
  const int64_t offset = nifti2 ? 544 : 352;
  nim->iname_offset = offset;

  std::string out(static_cast<size_t>(offset), '\0');
  if (nifti2) {
    nifti_2_header h;
    if (nifti_convert_nim2n2hdr(nim.get(), &h) != 0) fail(path, "libnifti could not make a NIfTI-2 header");
    std::memcpy(out.data(), &h, sizeof h);
  } else {
    nifti_1_header h;
    if (nifti_convert_nim2n1hdr(nim.get(), &h) != 0) fail(path, "libnifti could not make a NIfTI-1 header");
    std::memcpy(out.data(), &h, sizeof h);
  }
  return out;
}

// Writes `head` then `bytes` of `data` to `path`, through zlib when `gz`. Returns why it
// failed, or "" when it did not.
std::string write_file(const std::string& path, bool gz, const std::string& head, const void* data, size_t bytes) {
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (!f) return std::strerror(errno);
    bool ok = gzwrite(f, head.data(), static_cast<unsigned>(head.size())) == static_cast<int>(head.size());
    const auto* p = static_cast<const char*>(data);
    for (size_t done = 0; ok && done < bytes;) {
      const unsigned n = static_cast<unsigned>(std::min<size_t>(bytes - done, size_t{1} << 30));
      ok = gzwrite(f, p + done, n) == static_cast<int>(n);
      done += n;
    }
    if (gzclose(f) != Z_OK || !ok) return "gzip write failed (is the disk full?)";
    return "";
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return std::strerror(errno);
  const bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size() && std::fwrite(data, 1, bytes, f) == bytes;
  if (std::fclose(f) != 0 || !ok) return std::strerror(errno);
  return "";
}

template <class T>
void write_any(const std::string& path, const VolumeOf<T>& v, const NiftiWriteOptions& options, int datatype) {
  if (!is_nifti_name(path))
    throw std::invalid_argument("write_nifti: " + path + ": expected a name ending in .nii or .nii.gz");
  check_grid(v.grid, "write_nifti: " + path);
  if (static_cast<int64_t>(v.voxels.size()) != v.grid.voxel_count())
    throw std::invalid_argument("write_nifti: " + path + ": " + std::to_string(v.voxels.size()) +
                                " voxels for a grid of " + std::to_string(v.grid.voxel_count()));
  if (!options.nifti2)
    for (int64_t d : v.grid.dims)
      if (d > 32767)
        throw std::invalid_argument("write_nifti: " + path + ": a size of " + std::to_string(d) +
                                    " does not fit NIfTI-1's 16-bit sizes; write NIfTI-2");
  const std::string head = header_bytes(v.grid, datatype, options.nifti2, path);

  // Written beside the target under a temporary name, then renamed onto it.
  const fs::path target(path);
  std::string tmp_name = ".";
  tmp_name += target.filename().string() + ".tmp-" + std::to_string(::getpid());
  const fs::path tmp = target.parent_path() / tmp_name;
  const std::string why =
      write_file(tmp.string(), is_gz_name(path), head, v.voxels.data(), v.voxels.size() * sizeof(T));
  if (!why.empty()) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    fail(path, "cannot be written: " + why);
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    fail(path, "cannot be written: " + ec.message());
  }
}

}  // namespace

Volume read_nifti(const std::string& path) {
  if (!is_nifti_name(path)) fail(path, "expected a NIfTI file named *.nii or *.nii.gz");
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(path, "no such file");
  if (!fs::is_regular_file(path, ec)) fail(path, "is not a regular file");
  const uint64_t file_bytes = fs::file_size(path, ec);
  if (ec) fail(path, "cannot read its size: " + ec.message());
  check_header_bytes(path);

  NimPtr nim(nifti_image_read(path.c_str(), 0));
  if (!nim) fail(path, "libnifti could not read the header (corrupt or inconsistent)");

  // Sizes, checked before anything is allocated for them.
  const int64_t ndim = nim->dim[0];
  if (ndim < 1 || ndim > 7) fail(path, "header has " + std::to_string(ndim) + " dimensions, expected 1 to 7");
  for (int64_t d = 4; d <= ndim; ++d) {
    if (nim->dim[d] < 1)
      fail(path, "header has size " + std::to_string(nim->dim[d]) + " in dimension " + std::to_string(d));
    if (nim->dim[d] > 1)
      fail(path, "is a " + std::to_string(ndim) + "D image (" + dims_text(*nim) +
                     "); medical3d reads 3D volumes only: split the time points or channels into 3D files first");
  }
  Dims3 dims{1, 1, 1};
  for (int64_t d = 1; d <= std::min<int64_t>(ndim, 3); ++d) {
    if (nim->dim[d] < 1 || nim->dim[d] > kMaxVoxels)
      fail(path, "header has size " + std::to_string(nim->dim[d]) + " in dimension " + std::to_string(d));
    dims[d - 1] = nim->dim[d];
  }
  if (dims[0] * dims[1] > kMaxVoxels || dims[0] * dims[1] * dims[2] > kMaxVoxels)
    fail(path, "header promises " + dims_text(*nim) + " voxels, more than the " + std::to_string(kMaxVoxels) +
                   " medical3d reads");
  if (!is_supported_datatype(nim->datatype))
    fail(path, std::string("voxels are ") + nifti_datatype_string(nim->datatype) +
                   "; medical3d reads real scalar types only ((u)int8/16/32/64, float32/64)");

  const int64_t count = dims[0] * dims[1] * dims[2];
  if (nim->nvox != count)
    fail(path, "header is inconsistent: " + std::to_string(nim->nvox) + " voxels for " + dims_text(*nim));
  const uint64_t bytes = static_cast<uint64_t>(count) * static_cast<uint64_t>(nim->nbyper);
  const std::string promise = "header promises " + dims_text(*nim) + " " + nifti_datatype_string(nim->datatype) +
                              " voxels (" + std::to_string(bytes) + " bytes)";
  if (is_gz_name(path)) {
    if (bytes > file_bytes * kMaxDeflateRatio + kGzipSlackBytes)
      fail(path, promise + ", more than " + std::to_string(file_bytes) + " gzipped bytes can hold");
  } else {
    const uint64_t offset = static_cast<uint64_t>(nim->iname_offset);
    if (file_bytes < offset || file_bytes - offset < bytes)
      fail(path, "truncated: " + promise + " from byte " + std::to_string(offset) + " but the file holds only " +
                     std::to_string(file_bytes > offset ? file_bytes - offset : 0));
  }
  if (nifti_image_load(nim.get()) != 0 || !nim->data)
    fail(path, "truncated or corrupt: could not read the voxel data (" + promise + ")");

  Volume out;
  const char* source = nim->sform_code > 0 ? "sform" : nim->qform_code > 0 ? "qform" : "pixdim";
  out.grid = grid_from_affine(nim->sform_code > 0 ? nim->sto_xyz : nim->qto_xyz, dims, path, source);
  const bool scaled = std::isfinite(nim->scl_slope) && nim->scl_slope != 0;
  const double slope = scaled ? nim->scl_slope : 1.0;
  const double inter = scaled && std::isfinite(nim->scl_inter) ? nim->scl_inter : 0.0;
  out.voxels.resize(static_cast<size_t>(count));
  convert_any(nim->datatype, nim->data, count, slope, inter, out.voxels.data());
  return out;
}

LabelVolume read_nifti_labels(const std::string& path) {
  try {
    return to_labels(read_nifti(path), path);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
}

void write_nifti(const std::string& path, const Volume& volume, const NiftiWriteOptions& options) {
  write_any(path, volume, options, DT_FLOAT32);
}

void write_nifti(const std::string& path, const LabelVolume& labels, const NiftiWriteOptions& options) {
  write_any(path, labels, options, DT_UINT8);
}

}  // namespace quartet::medical3d

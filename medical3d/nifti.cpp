#include "medical3d/nifti.h"

#include <nifti2_io.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "engine/byte_source.h"
#include "medical3d/io_support.h"

namespace quartet::medical3d {
namespace {

namespace fs = std::filesystem;

constexpr int kNifti1HeaderBytes = 348;
constexpr int kNifti2HeaderBytes = 540;
// Deflate expands at most 1032-fold; the slack covers gzip framing on tiny files.
constexpr uint64_t kMaxDeflateRatio = 1032;
constexpr uint64_t kGzipSlackBytes = 1 << 16;
// Voxels are read, swapped and converted this many bytes at a time.
constexpr size_t kChunkBytes = size_t{1} << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

// A header field that is not what medical3d can read: what it holds and what it may hold.
[[noreturn]] void refuse(const std::string& path, const std::string& field, const std::string& found,
                         const std::string& allowed) {
  fail(path, field + " is " + found + "; allowed: " + allowed);
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

// A header's fields in the host's byte order, as the checks and the reader use them.
struct Header {
  int version = 1;       // 1 or 2
  bool swapped = false;  // the file's byte order is not the host's
  nifti_1_header n1{};   // the header in host order (the one of `version`), for libnifti
  nifti_2_header n2{};
  std::string magic;
  int64_t dim[8]{};
  double pixdim[8]{};
  int datatype = 0;
  double vox_offset = 0;
  int qform_code = 0, sform_code = 0;
  double quatern[6]{};  // quatern_b, c, d, qoffset_x, y, z
  double srow[3][4]{};
  double scl_slope = 0, scl_inter = 0;
  std::string descrip;

  int bytes() const { return version == 1 ? kNifti1HeaderBytes : kNifti2HeaderBytes; }
};

// A header string up to its NUL, with what a terminal would act on (escapes, controls)
// replaced by '?': a forged header must not garble the message or listing that shows it.
std::string printable(const char* s, size_t max) {
  std::string out(s, strnlen(s, max));
  for (char& c : out)
    if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  return out;
}

template <class H>
void copy_fields(const H& h, Header& out) {
  for (int i = 0; i < 8; ++i) {
    out.dim[i] = h.dim[i];
    out.pixdim[i] = h.pixdim[i];
  }
  out.datatype = h.datatype;
  out.vox_offset = static_cast<double>(h.vox_offset);
  out.qform_code = h.qform_code;
  out.sform_code = h.sform_code;
  const double q[6] = {h.quatern_b, h.quatern_c, h.quatern_d, h.qoffset_x, h.qoffset_y, h.qoffset_z};
  std::copy(q, q + 6, out.quatern);
  for (int c = 0; c < 4; ++c) {
    out.srow[0][c] = h.srow_x[c];
    out.srow[1][c] = h.srow_y[c];
    out.srow[2][c] = h.srow_z[c];
  }
  out.scl_slope = h.scl_slope;
  out.scl_inter = h.scl_inter;
  out.descrip = printable(h.descrip, sizeof h.descrip);
  out.magic = printable(h.magic, 4);
}

// Reads the header from the start of `src`. sizeof_hdr, in either byte order, says the
// version; libnifti would take any file and write its own terse errors to stderr.
Header read_header(engine::ByteSource& src, const std::string& path, bool gz) {
  uint8_t head[kNifti2HeaderBytes];
  const size_t got = src.read(head, 4);
  if (got < 4) fail(path, "truncated: " + std::to_string(got) + " bytes, not even a NIfTI header size");
  uint32_t size;
  std::memcpy(&size, head, 4);
  Header h;
  if (size != kNifti1HeaderBytes && size != kNifti2HeaderBytes) {
    size = bswap32(size);
    h.swapped = true;
  }
  if (size != kNifti1HeaderBytes && size != kNifti2HeaderBytes) {
    const bool gzipped = !gz && head[0] == 0x1f && head[1] == 0x8b;
    fail(path, std::string("not a NIfTI file: sizeof_hdr is neither 348 (NIfTI-1) nor 540 (NIfTI-2) in either "
                           "byte order") +
                   (gzipped ? "; the file is gzip-compressed: name it *.nii.gz" : ""));
  }
  const size_t total = 4 + src.read(head + 4, size - 4);
  if (total < size)
    fail(path, "truncated: " + std::to_string(total) + " bytes, shorter than its " + std::to_string(size) +
                   "-byte NIfTI-" + (size == kNifti1HeaderBytes ? "1" : "2") + " header");
  if (size == kNifti1HeaderBytes) {
    std::memcpy(&h.n1, head, sizeof h.n1);
    if (h.swapped) swap_nifti_header(&h.n1, 1);
    copy_fields(h.n1, h);
  } else {
    h.version = 2;
    std::memcpy(&h.n2, head, sizeof h.n2);
    if (h.swapped) swap_nifti_header(&h.n2, 2);
    copy_fields(h.n2, h);
  }
  return h;
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

// The values an integer datatype holds; nullopt for floats.
std::optional<std::pair<double, double>> integer_range(int dt) {
  auto of = [](auto t) {
    using T = decltype(t);
    return std::make_pair(static_cast<double>(std::numeric_limits<T>::lowest()),
                          static_cast<double>(std::numeric_limits<T>::max()));
  };
  switch (dt) {
    case DT_UINT8: return of(uint8_t{});
    case DT_INT8: return of(int8_t{});
    case DT_UINT16: return of(uint16_t{});
    case DT_INT16: return of(int16_t{});
    case DT_UINT32: return of(uint32_t{});
    case DT_INT32: return of(int32_t{});
    case DT_UINT64: return of(uint64_t{});
    case DT_INT64: return of(int64_t{});
    default: return std::nullopt;
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

std::string dims_text(const Header& h) {
  std::string s;
  for (int64_t d = 1; d <= std::clamp<int64_t>(h.dim[0], 1, 7); ++d) {
    if (d > 1) s += 'x';
    s += std::to_string(h.dim[d]);
  }
  return s;
}

std::string datatype_name(int datatype) {
  std::string name = nifti_datatype_string(datatype);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name;
}

// Every field the voxels and the grid depend on, checked before anything is allocated or
// read: libnifti would quietly mend some of them (a spacing of 0 or NaN becomes 1, a
// NIfTI-1 vox_offset past 2^31 becomes 348) and read the voxels from the wrong place.
void check_header(const Header& h, const std::string& path, uint64_t file_bytes, bool gz, const ReadLimits& limits) {
  const std::string single = h.version == 1 ? "n+1" : "n+2";
  if (h.magic != single)
    refuse(path, "magic", "\"" + h.magic + "\"" +
                              (h.magic == "ni1" || h.magic == "ni2" ? " (a header for a separate .img file)" : ""),
           "\"" + single + "\", a single-file NIfTI-" + std::to_string(h.version) + " image");

  // Sizes: positive, at most kMaxVoxels along an axis, then the voxel cap.
  const int64_t ndim = h.dim[0];
  if (ndim < 1 || ndim > 7) refuse(path, "dim[0] (the number of dimensions)", std::to_string(ndim), "1 to 7");
  const char* axis = "xyz";
  for (int64_t d = 1; d <= ndim; ++d) {
    const std::string field = "dim[" + std::to_string(d) + "]";
    if (d <= 3 && (h.dim[d] < 1 || h.dim[d] > kMaxVoxels))
      refuse(path, field + " (the size along " + axis[d - 1] + ")", std::to_string(h.dim[d]),
             "1 to " + std::to_string(kMaxVoxels) + " voxels");
    if (d > 3 && h.dim[d] < 1) refuse(path, field, std::to_string(h.dim[d]), "1 (a 3D volume)");
    if (d > 3 && h.dim[d] > 1)
      fail(path, "is a " + std::to_string(ndim) + "D image (" + dims_text(h) +
                     "); medical3d reads 3D volumes only: split the time points or channels into 3D files first");
  }
  // Three sizes of up to 2^30 overflow int64: the product is checked a factor at a time.
  int64_t count = 1;
  double claimed = 1;
  for (int64_t d = 1; d <= std::min<int64_t>(ndim, 3); ++d) {
    claimed *= static_cast<double>(h.dim[d]);
    count = count <= limits.max_voxels / h.dim[d] ? count * h.dim[d] : limits.max_voxels + 1;
  }
  if (count > limits.max_voxels)
    refuse(path, "dim[1..3]", dims_text(h) + ", " + header_number_text(claimed, 15) + " voxels", limits.allowed());

  int bytes_per_voxel = 0, swap_size = 0;
  nifti_datatype_sizes(h.datatype, &bytes_per_voxel, &swap_size);
  if (!is_supported_datatype(h.datatype))
    refuse(path, "datatype",
           std::to_string(h.datatype) + (bytes_per_voxel > 0 ? " (" + datatype_name(h.datatype) + ")"
                                                              : " (not a NIfTI datatype)"),
           "a real scalar type: uint8, int8, uint16, int16, uint32, int32, uint64, int64, float32, float64");

  // Scaling applies when scl_slope is finite and not 0 (as the standard says, and nibabel
  // reads it); it then needs a finite scl_inter, and must keep every stored integer a
  // finite float (float data out of range shows as voxels that are not finite).
  if (std::isfinite(h.scl_slope) && h.scl_slope != 0) {
    if (!std::isfinite(h.scl_inter))
      refuse(path, "scl_inter", header_number_text(h.scl_inter),
             "a finite number (scl_slope is " + header_number_text(h.scl_slope) + ": the voxels are scaled)");
    if (const std::optional<std::pair<double, double>> range = integer_range(h.datatype)) {
      const double a = range->first * h.scl_slope + h.scl_inter, b = range->second * h.scl_slope + h.scl_inter;
      if (!(std::abs(a) <= FLT_MAX && std::abs(b) <= FLT_MAX))
        refuse(path, "scl_slope, scl_inter",
               header_number_text(h.scl_slope) + ", " + header_number_text(h.scl_inter) + ", which turn " +
                   datatype_name(h.datatype) + " values " + header_number_text(range->first) + " to " +
                   header_number_text(range->second) + " into " + header_number_text(a) + " to " +
                   header_number_text(b),
               "a scaling that keeps them within a float's range (" + header_number_text(FLT_MAX) + ")");
    }
  }

  // Spacing, for the axes the image has; an axis it lacks is one voxel of 1 mm.
  for (int64_t d = 1; d <= std::min<int64_t>(ndim, 3); ++d)
    if (!std::isfinite(h.pixdim[d]) || h.pixdim[d] <= 0)
      refuse(path, "pixdim[" + std::to_string(d) + "] (the spacing along " + axis[d - 1] + ")",
             header_number_text(h.pixdim[d]), "a finite spacing > 0 mm");
  if (h.qform_code > 0) {
    const char* names[6] = {"quatern_b", "quatern_c", "quatern_d", "qoffset_x", "qoffset_y", "qoffset_z"};
    for (int i = 0; i < 6; ++i)
      if (!std::isfinite(h.quatern[i]))
        refuse(path, names[i], header_number_text(h.quatern[i]), "a finite number (qform_code > 0: the qform is used)");
  }
  if (h.sform_code > 0)
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c)
        if (!std::isfinite(h.srow[r][c]))
          refuse(path, std::string("srow_") + axis[r] + "[" + std::to_string(c) + "]", header_number_text(h.srow[r][c]),
                 "a finite number (sform_code > 0: the sform is used)");

  // Where the voxels are, and whether the file can hold them.
  const uint64_t bytes = static_cast<uint64_t>(count) * static_cast<uint64_t>(bytes_per_voxel);
  const uint64_t first = static_cast<uint64_t>(h.bytes());
  uint64_t last = first + static_cast<uint64_t>(kMaxNiftiExtensionBytes);
  std::string why_last = std::to_string(kMaxNiftiExtensionBytes >> 20) + " MiB of header extensions at most";
  if (!gz && file_bytes >= first + bytes && file_bytes - bytes < last) {
    last = file_bytes - bytes;
    why_last = "where the " + std::to_string(bytes) + " bytes of voxels end with the file";
  }
  const std::string range =
      std::to_string(first) + " (the header's size) to " + std::to_string(last) + " (" + why_last + ")";
  if (!std::isfinite(h.vox_offset) || h.vox_offset != std::floor(h.vox_offset) || h.vox_offset < 0)
    refuse(path, "vox_offset", header_number_text(h.vox_offset), "a whole number of bytes, " + range);
  if (!gz && h.vox_offset > static_cast<double>(file_bytes))
    refuse(path, "vox_offset",
           header_number_text(h.vox_offset) + ", past the end of the file (" + std::to_string(file_bytes) + " bytes)", range);
  if (h.vox_offset < static_cast<double>(first) || h.vox_offset > static_cast<double>(last))
    refuse(path, "vox_offset", header_number_text(h.vox_offset), range);
  const auto offset = static_cast<uint64_t>(h.vox_offset);
  const std::string promise = "header promises " + dims_text(h) + " " + datatype_name(h.datatype) +
                              " voxels (" + std::to_string(bytes) + " bytes)";
  if (gz) {
    if (offset + bytes > file_bytes * kMaxDeflateRatio + kGzipSlackBytes)
      fail(path, promise + " from byte " + std::to_string(offset) + ", more than " + std::to_string(file_bytes) +
                     " gzipped bytes can hold (deflate expands at most " + std::to_string(kMaxDeflateRatio) + "-fold)");
  } else if (file_bytes - offset < bytes) {
    fail(path, "truncated: " + promise + " from byte " + std::to_string(offset) + " but the file holds only " +
                   std::to_string(file_bytes - offset));
  }
}

// Reads `count` voxels of the header's datatype from `src`, which stands at the first,
// into floats (stored * slope + inter): a chunk at a time, so memory grows with the bytes
// the file really holds, never with what its header claims.
std::vector<float> read_voxels(engine::ByteSource& src, const std::string& path, const Header& h, int64_t count,
                               double slope, double inter) {
  int bytes_per_voxel = 0, swap_size = 0;
  nifti_datatype_sizes(h.datatype, &bytes_per_voxel, &swap_size);
  const size_t per_chunk = kChunkBytes / static_cast<size_t>(bytes_per_voxel);
  std::vector<char> chunk(per_chunk * static_cast<size_t>(bytes_per_voxel));
  std::vector<float> out;
  out.reserve(static_cast<size_t>(count));  // address space only until written
  for (int64_t done = 0; done < count;) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(count - done, static_cast<int64_t>(per_chunk)));
    const size_t want = n * static_cast<size_t>(bytes_per_voxel);
    const size_t got = src.read(chunk.data(), want);
    if (got < want)
      fail(path, "truncated or corrupt: the header promises " + std::to_string(count) + " voxels of " +
                     std::to_string(bytes_per_voxel) + " bytes, the data ends after " +
                     std::to_string(done + static_cast<int64_t>(got) / bytes_per_voxel));
    if (h.swapped && bytes_per_voxel > 1)
      for (size_t i = 0; i < want; i += static_cast<size_t>(bytes_per_voxel))
        std::reverse(chunk.begin() + static_cast<std::ptrdiff_t>(i),
                     chunk.begin() + static_cast<std::ptrdiff_t>(i) + bytes_per_voxel);
    out.resize(out.size() + n);
    convert_any(h.datatype, chunk.data(), static_cast<int64_t>(n), slope, inter, out.data() + done);
    done += static_cast<int64_t>(n);
  }
  return out;
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

NiftiImage read_nifti_image(const std::string& path, const ReadLimits& limits) {
  if (!is_nifti_name(path)) fail(path, "expected a NIfTI file named *.nii or *.nii.gz");
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(path, "no such file");
  if (!fs::is_regular_file(path, ec)) fail(path, "is not a regular file");
  const uint64_t file_bytes = fs::file_size(path, ec);
  if (ec) fail(path, "cannot read its size: " + ec.message());
  const bool gz = is_gz_name(path);

  engine::ByteSource src(path, gz);
  Header h = read_header(src, path, gz);
  check_header(h, path, file_bytes, gz, limits);
  // An axis the image lacks is one voxel thick, 1 mm, whatever its pixdim says.
  for (int d = static_cast<int>(h.dim[0]) + 1; d <= 3; ++d) {
    h.n1.pixdim[d] = 1;
    h.n2.pixdim[d] = 1;
  }
  // libnifti turns the checked header (host order, so it swaps nothing) into the affines.
  NimPtr nim(h.version == 1 ? nifti_convert_n1hdr2nim(h.n1, nullptr) : nifti_convert_n2hdr2nim(h.n2, nullptr));
  if (!nim) fail(path, "libnifti could not read the header (corrupt or inconsistent)");

  NiftiImage out;
  out.version = h.version;
  out.gzipped = gz;
  out.datatype = datatype_name(h.datatype);
  out.bytes_per_voxel = nim->nbyper;
  out.qform_code = nim->qform_code;
  out.sform_code = nim->sform_code;
  out.description = h.descrip;
  out.affine = nim->sform_code > 0 ? "sform" : nim->qform_code > 0 ? "qform" : "pixdim";
  Dims3 dims{1, 1, 1};
  for (int64_t d = 1; d <= std::min<int64_t>(h.dim[0], 3); ++d) dims[d - 1] = h.dim[d];
  out.volume.grid = grid_from_affine(nim->sform_code > 0 ? nim->sto_xyz : nim->qto_xyz, dims, path,
                                     out.affine.c_str());
  // Unscaled unless scl_slope is finite and non-zero, as the standard says.
  const bool scaled = std::isfinite(h.scl_slope) && h.scl_slope != 0;
  out.scl_slope = scaled ? h.scl_slope : 1.0;
  out.scl_inter = scaled && std::isfinite(h.scl_inter) ? h.scl_inter : 0.0;

  const int64_t count = dims[0] * dims[1] * dims[2];
  const uint64_t skip = static_cast<uint64_t>(h.vox_offset) - static_cast<uint64_t>(h.bytes());
  if (!src.skip(skip))  // only a .nii.gz: a plain file's size was checked
    fail(path, "truncated: vox_offset is " + header_number_text(h.vox_offset) + ", past the end of the decompressed data");
  out.volume.voxels = read_voxels(src, path, h, count, out.scl_slope, out.scl_inter);
  return out;
}

Volume read_nifti(const std::string& path, const ReadLimits& limits) { return read_nifti_image(path, limits).volume; }

LabelVolume read_nifti_labels(const std::string& path, const ReadLimits& limits) {
  try {
    return to_labels(read_nifti(path, limits), path);
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

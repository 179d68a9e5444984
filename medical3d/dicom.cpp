#include "medical3d/dicom.h"

#include <dcmtk/config/osconfig.h>  // must come first
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcdict.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcstack.h>
#include <dcmtk/dcmdata/dcxfer.h>
#include <pthread.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string_view>

#include "medical3d/io_support.h"

namespace quartet::medical3d {
namespace {

namespace fs = std::filesystem;

// Geometry tags are decimal strings; agreeing values may differ in their last digits.
constexpr double kCosineTolerance = 1e-4;
constexpr double kSpacingTolerance = 1e-4;  // relative
constexpr double kSamePositionMm = 1e-3;
constexpr double kGapTolerance = 0.01;  // relative to the median gap

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw std::runtime_error(where + ": " + what);
}

// What one slice file says about itself; pixel data stays on disk until the slices agree.
struct Slice {
  std::string path;
  std::string series_uid;
  std::string problem;  // a missing or unsupported tag: refused only if this series is read
  std::string modality;  // "CT", "MR", … (Modality), empty when absent
  uint16_t rows = 0, cols = 0;
  double row_spacing = 0, col_spacing = 0;  // PixelSpacing[0], [1]
  Vec3 row_cosine{}, col_cosine{}, position{};
  double slope = 1, intercept = 0, thickness = 0;
  uint16_t bits_allocated = 0, bits_stored = 0, pixel_representation = 0;
  double along_normal = 0;  // position projected on the slice normal
};

std::string name_of(const std::string& path) { return fs::path(path).filename().string(); }

Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
double dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }

bool spacing_ok(double mm) { return std::isfinite(mm) && mm > 0; }

// "DICM" after the 128-byte preamble, as DICOM files (part 10) begin.
bool has_dicom_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.seekg(128);
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "DICM", 4) == 0;
}

// A part-10 file, or an old bare dataset starting with a group 0002 or 0008 tag. Other
// files (notes, thumbnails) are not handed to DCMTK, which would log parse errors.
bool looks_like_dicom(const std::string& path) {
  if (has_dicom_magic(path)) return true;
  std::ifstream in(path, std::ios::binary);
  unsigned char head[2] = {};
  in.read(reinterpret_cast<char*>(head), 2);
  return in.gcount() == 2 && (head[1] == 0 && (head[0] == 0x02 || head[0] == 0x08));
}

std::optional<double> get_f64(DcmDataset& ds, const DcmTagKey& tag, unsigned long pos = 0) {
  Float64 v = 0;
  if (ds.findAndGetFloat64(tag, v, pos).bad()) return std::nullopt;
  return v;
}


// DCMTK parses a sequence by recursing into its items, about 2 KiB of stack a level (a
// slice of 8,000 nested sequences overflowed a thread's 8 MiB). A data set nests no
// deeper than it has items, and an item starts with the tag (FFFE,E000) in the file's
// bytes whatever its encoding, so counting those bounds the stack DCMTK needs before it
// runs: a file is parsed on a thread with kStackPerItem for each (four times what a level
// takes), and its nesting is checked once it is parsed. Deflated data sets hide their
// tags; they are refused.
constexpr int64_t kMaxSequenceItems = 10'000;
constexpr int kMaxSequenceDepth = 32;
constexpr size_t kBaseStackBytes = size_t{8} << 20;
constexpr size_t kStackPerItem = size_t{8} << 10;
constexpr std::string_view kDeflatedXfer = "1.2.840.10008.1.2.1.99";

struct ItemScan {
  int64_t items = 0;  // item tags, in either byte order
  bool deflated = false;  // the deflated transfer syntax's UID appears
};

ItemScan scan_items(const std::string& path) {
  static constexpr char kLittle[4] = {'\xFE', '\xFF', '\x00', '\xE0'}, kBig[4] = {'\xFF', '\xFE', '\xE0', '\x00'};
  const std::string_view little(kLittle, 4), big(kBig, 4);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open the file");
  ItemScan scan;
  std::vector<char> chunk(size_t{1} << 20);
  std::string window;  // the last bytes of the previous chunk, then this chunk
  const size_t keep = kDeflatedXfer.size() - 1;
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const size_t got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    const size_t carried = window.size();
    window.append(chunk.data(), got);
    const std::string_view w(window);
    // A tag counts where it ends in the new bytes: one inside the carried bytes was counted.
    for (const std::string_view tag : {little, big})
      for (size_t at = w.find(tag, carried >= 3 ? carried - 3 : 0); at != std::string_view::npos; at = w.find(tag, at + 1))
        ++scan.items;
    scan.deflated = scan.deflated || w.find(kDeflatedXfer) != std::string_view::npos;
    window.erase(0, window.size() > keep ? window.size() - keep : 0);
  }
  return scan;
}

// Runs `f` on a thread of its own with a stack of `bytes`; its exception is rethrown here.
void on_stack(size_t bytes, const std::function<void()>& f) {
  struct Call {
    const std::function<void()>* f;
    std::exception_ptr error;
  } call{&f, nullptr};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, bytes);
  pthread_t thread;
  const int rc = pthread_create(
      &thread, &attr,
      [](void* p) -> void* {
        Call& c = *static_cast<Call*>(p);
        try {
          (*c.f)();
        } catch (...) {
          c.error = std::current_exception();
        }
        return nullptr;
      },
      &call);
  pthread_attr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("cannot start a thread to parse DICOM: " + std::string(std::strerror(rc)));
  pthread_join(thread, nullptr);
  if (call.error) std::rethrow_exception(call.error);
}

// Sequences on the deepest path of `ds`: a walk of DCMTK's own, with a stack of its own.
int sequence_depth(DcmDataset& ds) {
  DcmStack stack;
  unsigned long deepest = 0;
  while (ds.nextObject(stack, OFTrue).good()) deepest = std::max(deepest, stack.card());
  return static_cast<int>(deepest / 2);  // the data set, then a sequence and an item a level
}

// Parses `path` with DCMTK and hands loadFile's status and the file to `use`, on a stack
// that holds the file's nesting; the file (whose destructor recurses as its parser did)
// is gone when this returns. Throws naming the file when it holds more than
// kMaxSequenceItems items, is deflated, or nests deeper than kMaxSequenceDepth.
void parse_dicom(const std::string& path, const std::function<void(OFCondition, DcmFileFormat&)>& use) {
  const ItemScan scan = scan_items(path);
  if (scan.deflated)
    fail(path, "a deflated data set (transfer syntax " + std::string(kDeflatedXfer) +
                   ") is not read; allowed: uncompressed data sets (inflate it first, e.g. with dcmconv +te)");
  if (scan.items > kMaxSequenceItems)
    fail(path, "holds " + std::to_string(scan.items) + " sequence items; allowed: at most " +
                   std::to_string(kMaxSequenceItems) + " (an image slice holds a few)");
  on_stack(kBaseStackBytes + kStackPerItem * static_cast<size_t>(scan.items), [&] {
    DcmFileFormat file;
    // Values longer than DCM_MaxReadLength (the pixel data) are left on disk for now.
    const OFCondition status = file.loadFile(path.c_str());
    if (status.good()) {
      const int depth = sequence_depth(*file.getDataset());
      if (depth > kMaxSequenceDepth)
        fail(path, "sequences nest " + std::to_string(depth) + " deep; allowed: at most " +
                       std::to_string(kMaxSequenceDepth) + " (an image slice nests a few)");
    }
    use(status, file);
  });
}

// What a parsed file says about itself; nullopt (with a note) when it is not a DICOM image slice.
std::optional<Slice> slice_from(const std::string& path, OFCondition status, DcmFileFormat& file,
                                std::vector<std::string>& notes) {
  if (status.bad()) {
    // A file with the DICOM preamble that does not parse is a broken slice, not a stray file.
    if (has_dicom_magic(path)) fail(path, std::string("truncated or corrupt DICOM file (") + status.text() + ")");
    notes.push_back("skipped " + name_of(path) + ": not a DICOM file (" + status.text() + ")");
    return std::nullopt;
  }
  DcmDataset& ds = *file.getDataset();
  DcmElement* pixels = nullptr;
  if (ds.findAndGetElement(DCM_PixelData, pixels).bad() || !pixels) {
    notes.push_back("skipped " + name_of(path) + ": DICOM without pixel data");
    return std::nullopt;
  }
  OFString uid;
  if (ds.findAndGetOFString(DCM_SeriesInstanceUID, uid).bad() || uid.empty()) {
    notes.push_back("skipped " + name_of(path) + ": DICOM image without a SeriesInstanceUID");
    return std::nullopt;
  }

  Slice s;
  s.path = path;
  s.series_uid = uid.c_str();
  auto problem = [&](const std::string& p) {
    if (s.problem.empty()) s.problem = p;
  };
  if (ds.findAndGetUint16(DCM_Rows, s.rows).bad() || s.rows == 0) problem("no Rows");
  if (ds.findAndGetUint16(DCM_Columns, s.cols).bad() || s.cols == 0) problem("no Columns");
  const auto rs = get_f64(ds, DCM_PixelSpacing, 0), cs = get_f64(ds, DCM_PixelSpacing, 1);
  if (!rs || !cs)
    problem("no PixelSpacing; allowed: two finite spacings > 0 mm");
  else if (!spacing_ok(*rs) || !spacing_ok(*cs))
    problem("PixelSpacing is " + header_number_text(*rs) + "\\" + header_number_text(*cs) +
            "; allowed: two finite spacings > 0 mm");
  else
    s.row_spacing = *rs, s.col_spacing = *cs;
  for (int i = 0; i < 6; ++i) {
    const auto v = get_f64(ds, DCM_ImageOrientationPatient, i);
    if (!v) {
      problem("no ImageOrientationPatient");
      break;
    }
    if (!std::isfinite(*v)) {
      problem("ImageOrientationPatient[" + std::to_string(i) + "] is " + header_number_text(*v) +
              "; allowed: six finite direction cosines");
      break;
    }
    (i < 3 ? s.row_cosine[i] : s.col_cosine[i - 3]) = *v;
  }
  for (int i = 0; i < 3; ++i) {
    const auto v = get_f64(ds, DCM_ImagePositionPatient, i);
    if (!v) {
      problem("no ImagePositionPatient");
      break;
    }
    if (!std::isfinite(*v)) {
      problem("ImagePositionPatient[" + std::to_string(i) + "] is " + header_number_text(*v) +
              "; allowed: three finite coordinates in mm");
      break;
    }
    s.position[i] = *v;
  }
  // findAndGetFloat64 leaves 0 for an absent slope: the standard's default is 1.
  s.slope = get_f64(ds, DCM_RescaleSlope).value_or(1.0);
  s.intercept = get_f64(ds, DCM_RescaleIntercept).value_or(0.0);
  if (s.slope == 0 || !std::isfinite(s.slope) || !std::isfinite(s.intercept))
    problem("RescaleSlope/RescaleIntercept are " + std::to_string(s.slope) + "/" + std::to_string(s.intercept));
  const auto thickness = get_f64(ds, DCM_SliceThickness);
  if (thickness && !spacing_ok(*thickness))
    problem("SliceThickness is " + header_number_text(*thickness) + "; allowed: a finite thickness > 0 mm");
  s.thickness = thickness.value_or(0.0);
  OFString modality;
  if (ds.findAndGetOFString(DCM_Modality, modality).good()) s.modality = modality.c_str();

  uint16_t samples = 1;
  ds.findAndGetUint16(DCM_SamplesPerPixel, samples);
  if (samples != 1) problem(std::to_string(samples) + " samples per pixel (colour); expected 1");
  Sint32 frames = 1;
  ds.findAndGetSint32(DCM_NumberOfFrames, frames);
  if (frames > 1) problem(std::to_string(frames) + " frames; multi-frame DICOM is not supported");
  if (ds.findAndGetUint16(DCM_BitsAllocated, s.bits_allocated).bad() ||
      (s.bits_allocated != 8 && s.bits_allocated != 16))
    problem("BitsAllocated " + std::to_string(s.bits_allocated) + "; expected 8 or 16");
  if (ds.findAndGetUint16(DCM_BitsStored, s.bits_stored).bad() || s.bits_stored == 0) s.bits_stored = s.bits_allocated;
  s.bits_stored = std::min(s.bits_stored, s.bits_allocated);
  ds.findAndGetUint16(DCM_PixelRepresentation, s.pixel_representation);
  if (s.problem.empty()) {
    // Every stored value must stay a finite float once rescaled.
    const bool is_signed = s.pixel_representation == 1;
    const double lo = is_signed ? -std::ldexp(1.0, s.bits_stored - 1) : 0.0;
    const double hi = is_signed ? std::ldexp(1.0, s.bits_stored - 1) - 1 : std::ldexp(1.0, s.bits_stored) - 1;
    const double a = lo * s.slope + s.intercept, b = hi * s.slope + s.intercept;
    if (!(std::abs(a) <= FLT_MAX && std::abs(b) <= FLT_MAX))
      problem("RescaleSlope " + header_number_text(s.slope) + " and RescaleIntercept " +
              header_number_text(s.intercept) + " turn stored values " + header_number_text(lo) + " to " +
              header_number_text(hi) + " into " + header_number_text(a) + " to " + header_number_text(b) +
              "; allowed: a rescale that keeps them within a float's range (" + header_number_text(FLT_MAX) + ")");
  }
  if (DcmXfer(ds.getOriginalXfer()).isEncapsulated())
    problem(std::string("compressed pixel data (") + DcmXfer(ds.getOriginalXfer()).getXferName() +
            "); decompress it first, e.g. with dcmdjpeg");
  else if (s.problem.empty() && pixels->getLength() < uint64_t{s.rows} * s.cols * (s.bits_allocated / 8))
    problem("pixel data holds " + std::to_string(pixels->getLength()) + " bytes, Rows x Columns needs " +
            std::to_string(uint64_t{s.rows} * s.cols * (s.bits_allocated / 8)));
  return s;
}

// Reads the header of `path`; nullopt (with a note) when it is not a DICOM image slice.
std::optional<Slice> read_slice_header(const std::string& path, std::vector<std::string>& notes) {
  if (!looks_like_dicom(path)) {
    notes.push_back("skipped " + name_of(path) + ": not a DICOM file");
    return std::nullopt;
  }
  std::optional<Slice> slice;
  parse_dicom(path, [&](OFCondition status, DcmFileFormat& file) { slice = slice_from(path, status, file, notes); });
  return slice;
}

// The slices of the series to read, or a refusal listing the series found.
std::vector<Slice> pick_series(const std::string& folder, std::vector<Slice> slices, const std::string& series_uid) {
  std::map<std::string, std::vector<Slice>> by_series;
  for (Slice& s : slices) by_series[s.series_uid].push_back(std::move(s));
  auto list = [&] {
    std::string out;
    for (const auto& [uid, group] : by_series) out += "\n  " + uid + " (" + std::to_string(group.size()) + " slices)";
    return out;
  };
  if (!series_uid.empty()) {
    auto it = by_series.find(series_uid);
    if (it == by_series.end()) fail(folder, "no series " + series_uid + "; the folder holds:" + list());
    return std::move(it->second);
  }
  if (by_series.size() > 1)
    fail(folder, "holds " + std::to_string(by_series.size()) + " series; name the one to read:" + list());
  return std::move(by_series.begin()->second);
}

// What must agree across slices, rounded to the tolerances below.
std::string layout_key(const Slice& s) {
  char key[256];
  std::snprintf(key, sizeof key, "%u %u %.4g %.4g %.3f %.3f %.3f %.3f %.3f %.3f %u %u", s.rows, s.cols, s.row_spacing,
                s.col_spacing, s.row_cosine[0], s.row_cosine[1], s.row_cosine[2], s.col_cosine[0], s.col_cosine[1],
                s.col_cosine[2], s.bits_allocated, s.pixel_representation);
  return key;
}

// Refuses slices that do not describe the same grid as the others. The reference is the
// first slice of the most common layout, so the message blames the odd one out.
void check_agreement(const std::vector<Slice>& slices) {
  for (const Slice& s : slices)
    if (!s.problem.empty()) fail(s.path, s.problem);
  std::map<std::string, int> votes;
  for (const Slice& s : slices) ++votes[layout_key(s)];
  const Slice* best = &slices.front();
  for (const Slice& s : slices)
    if (votes[layout_key(s)] > votes[layout_key(*best)]) best = &s;
  const Slice& ref = *best;
  for (const Slice& s : slices) {
    const std::string versus = " but " + name_of(ref.path) + " has ";
    if (s.rows != ref.rows || s.cols != ref.cols)
      fail(s.path, "slice is " + std::to_string(s.cols) + "x" + std::to_string(s.rows) + " (Columns x Rows)" + versus +
                       std::to_string(ref.cols) + "x" + std::to_string(ref.rows));
    auto close = [](double a, double b) {
      return std::abs(a - b) <= kSpacingTolerance * std::max(std::abs(a), std::abs(b));
    };
    if (!close(s.row_spacing, ref.row_spacing) || !close(s.col_spacing, ref.col_spacing))
      fail(s.path, "PixelSpacing " + std::to_string(s.row_spacing) + "\\" + std::to_string(s.col_spacing) + versus +
                       std::to_string(ref.row_spacing) + "\\" + std::to_string(ref.col_spacing));
    for (int i = 0; i < 3; ++i)
      if (std::abs(s.row_cosine[i] - ref.row_cosine[i]) > kCosineTolerance ||
          std::abs(s.col_cosine[i] - ref.col_cosine[i]) > kCosineTolerance)
        fail(s.path, "ImageOrientationPatient differs from " + name_of(ref.path) + "'s");
    if (s.bits_allocated != ref.bits_allocated || s.pixel_representation != ref.pixel_representation)
      fail(s.path, "BitsAllocated/PixelRepresentation " + std::to_string(s.bits_allocated) + "/" +
                       std::to_string(s.pixel_representation) + versus + std::to_string(ref.bits_allocated) + "/" +
                       std::to_string(ref.pixel_representation));
  }
}

// One slice's stored values from its parsed file into `dst` as modality values.
void pixels_from(const Slice& s, OFCondition status, DcmFileFormat& file, float* dst) {
  if (status.bad()) fail(s.path, std::string("truncated or corrupt DICOM file (") + status.text() + ")");
  DcmDataset& ds = *file.getDataset();
  const uint64_t n = uint64_t{s.rows} * s.cols;
  unsigned long count = 0;
  std::vector<uint32_t> raw(n);
  if (s.bits_allocated == 16) {
    const Uint16* p = nullptr;
    if (ds.findAndGetUint16Array(DCM_PixelData, p, &count).bad() || !p || count < n)
      fail(s.path, "truncated or corrupt pixel data: cannot read " + std::to_string(n) + " 16-bit pixels");
    std::copy(p, p + n, raw.begin());
  } else {
    const Uint8* p = nullptr;
    if (ds.findAndGetUint8Array(DCM_PixelData, p, &count).bad() || !p || count < n)
      fail(s.path, "truncated or corrupt pixel data: cannot read " + std::to_string(n) + " 8-bit pixels");
    std::copy(p, p + n, raw.begin());
  }
  // Keep BitsStored bits (higher ones may hold overlays) and sign-extend two's complement.
  const uint32_t mask = (uint32_t{1} << s.bits_stored) - 1;
  const uint32_t sign = uint32_t{1} << (s.bits_stored - 1);
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t u = raw[i] & mask;
    const int64_t stored = s.pixel_representation == 1 && (u & sign) ? int64_t{u} - (int64_t{mask} + 1) : int64_t{u};
    dst[i] = static_cast<float>(static_cast<double>(stored) * s.slope + s.intercept);
  }
}

// Reads one slice's stored values into `dst` (Rows x Columns, x fastest) as modality values.
void read_pixels(const Slice& s, float* dst) {
  parse_dicom(s.path, [&](OFCondition status, DcmFileFormat& file) { pixels_from(s, status, file, dst); });
}

}  // namespace

DicomSeries read_dicom_series(const std::string& folder, const std::string& series_uid, const ReadLimits& limits) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) fail(folder, "no such folder");
  if (!dcmDataDict.isDictionaryLoaded())
    fail(folder, "DCMTK's data dictionary is not loaded (is libdcmtk installed? DCMDICTPATH names it)");

  DicomSeries out;
  std::vector<std::string> paths;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    std::error_code entry_ec;  // a dangling link is not a slice, nor a reason to stop
    if (entry.is_regular_file(entry_ec)) paths.push_back(entry.path().string());
  }
  if (ec) fail(folder, "cannot list the folder: " + ec.message());
  std::sort(paths.begin(), paths.end());  // notes and tie-breaks do not depend on the file system

  std::vector<Slice> slices;
  for (const std::string& p : paths)
    if (auto s = read_slice_header(p, out.notes)) slices.push_back(std::move(*s));
  if (slices.empty()) fail(folder, "no DICOM image slices among its " + std::to_string(paths.size()) + " files");
  slices = pick_series(folder, std::move(slices), series_uid);
  check_agreement(slices);
  // Rows and Columns are 16-bit: the product cannot overflow.
  const int64_t voxels = int64_t{slices.front().rows} * slices.front().cols * static_cast<int64_t>(slices.size());
  if (voxels > limits.max_voxels)
    fail(folder, "series " + slices.front().series_uid + " is " + std::to_string(slices.front().cols) + "x" +
                     std::to_string(slices.front().rows) + " (Columns x Rows) x " + std::to_string(slices.size()) +
                     " slices, " + std::to_string(voxels) + " voxels; allowed: " + limits.allowed());

  // Order along the normal; positions give the spacing. All slices agree with `ref`.
  const Slice ref = slices.front();
  Vec3 normal = cross(ref.row_cosine, ref.col_cosine);
  const double norm = std::sqrt(dot(normal, normal));
  if (!(norm > 0.5)) fail(ref.path, "ImageOrientationPatient's row and column cosines are not orthogonal unit vectors");
  for (double& c : normal) c /= norm;
  for (Slice& s : slices) s.along_normal = dot(s.position, normal);
  std::stable_sort(slices.begin(), slices.end(),
                   [](const Slice& a, const Slice& b) { return a.along_normal < b.along_normal; });

  const size_t n = slices.size();
  double gap = ref.thickness > 0 ? ref.thickness : 1.0;
  if (n > 1) {
    std::vector<double> gaps;
    for (size_t i = 1; i < n; ++i) {
      gaps.push_back(slices[i].along_normal - slices[i - 1].along_normal);
      if (gaps.back() < kSamePositionMm)
        fail(slices[i].path, "same position along the slice normal (" + std::to_string(slices[i].along_normal) +
                                 " mm) as " + name_of(slices[i - 1].path) + ": a duplicate slice?");
    }
    // The median gap is the series' spacing; a gap that differs marks a missing slice.
    std::vector<double> sorted = gaps;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
    const double median = sorted[sorted.size() / 2];
    for (size_t i = 1; i < n; ++i)
      if (std::abs(gaps[i - 1] - median) > kGapTolerance * median)
        fail(slices[i].path, "is " + std::to_string(gaps[i - 1]) + " mm from " + name_of(slices[i - 1].path) +
                                 " along the slice normal, but the other slices are " + std::to_string(median) +
                                 " mm apart: a missing slice?");
    gap = (slices.back().along_normal - slices.front().along_normal) / static_cast<double>(n - 1);
    for (const Slice& s : slices) {
      const double along = s.along_normal - slices.front().along_normal;
      Vec3 offset;
      for (int i = 0; i < 3; ++i) offset[i] = s.position[i] - slices.front().position[i] - along * normal[i];
      if (std::sqrt(dot(offset, offset)) > 1e-2 + 1e-3 * std::abs(along))
        fail(s.path, "not stacked along the slice normal (in-plane offset " +
                         std::to_string(std::sqrt(dot(offset, offset))) +
                         " mm): a tilted gantry or sheared series is not supported");
    }
  }

  Grid g;
  g.dims = {ref.cols, ref.rows, static_cast<int64_t>(n)};
  g.spacing = {ref.col_spacing, ref.row_spacing, gap};
  g.origin = slices.front().position;
  for (int r = 0; r < 3; ++r) {
    g.direction[3 * r + 0] = ref.row_cosine[r];
    g.direction[3 * r + 1] = ref.col_cosine[r];
    g.direction[3 * r + 2] = normal[r];
  }
  try {
    check_grid(g, "series " + ref.series_uid);
  } catch (const std::invalid_argument& e) {
    fail(folder, e.what());
  }

  out.volume.grid = g;
  out.volume.voxels.resize(static_cast<size_t>(g.voxel_count()));
  const size_t per_slice = static_cast<size_t>(ref.rows) * ref.cols;
  for (size_t k = 0; k < n; ++k) {
    read_pixels(slices[k], out.volume.voxels.data() + k * per_slice);
    out.files.push_back(slices[k].path);
  }
  out.series_uid = ref.series_uid;
  out.modality = ref.modality;
  out.datatype = (ref.pixel_representation == 1 ? "int" : "uint") + std::to_string(ref.bits_allocated);
  out.rescaled = std::any_of(slices.begin(), slices.end(), [](const Slice& s) { return s.slope != 1 || s.intercept != 0; });
  return out;
}

}  // namespace quartet::medical3d

#include "workloads/idx.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "engine/byte_source.h"

namespace quartet::workloads {
namespace {

namespace fs = std::filesystem;

constexpr uint8_t kUbyte = 0x08;
// A compressed file's data is read this much at a time: its header's size is a claim.
constexpr size_t kGrowthBytes = size_t{8} << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct IdxData {
  std::vector<uint64_t> dims;
  std::vector<uint8_t> bytes;
};

// Reads a ubyte idx file with `ndims` dimensions; `kind` names it in errors.
IdxData read_idx(const std::string& path, int ndims, const char* kind) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(path, "no such file");
  if (fs::is_directory(path, ec)) fail(path, "is a folder, expected an idx file");
  engine::ByteSource src(path, ends_with(path, ".gz"));
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  uint8_t head[4 + 4 * 3];
  const size_t got = src.read(head, header);
  if (got < 4)
    fail(path, "truncated: " + std::to_string(got) + " bytes, not even an idx magic number");
  const uint32_t magic = be32(head);
  const uint32_t expected = (uint32_t{kUbyte} << 8) | static_cast<uint32_t>(ndims);
  if (magic != expected) {
    const bool gzipped = head[0] == 0x1f && head[1] == 0x8b;
    fail(path, "bad magic " + hex32(magic) + ", expected " + hex32(expected) + " (" + kind + "); " +
                   (gzipped ? "the file is gzip-compressed: name it *.gz" : "is this an MNIST-format idx file?"));
  }
  if (got < header)
    fail(path, "truncated: the file ends inside its " + std::to_string(header) + "-byte header");

  IdxData out;
  uint64_t payload = 1;
  for (int d = 0; d < ndims; ++d) {
    const uint64_t n = be32(head + 4 + 4 * d);
    if (n == 0) fail(path, "header has size 0 in dimension " + std::to_string(d));
    if (payload > std::numeric_limits<uint64_t>::max() / n)
      fail(path, "header sizes overflow 64 bits");
    payload *= n;
    out.dims.push_back(n);
  }
  std::string promise = "header promises " + std::to_string(out.dims[0]);
  if (ndims == 3)
    promise += " images of " + std::to_string(out.dims[1]) + "x" + std::to_string(out.dims[2]);
  else
    promise += " labels";
  promise += " (" + std::to_string(payload) + " bytes after the " + std::to_string(header) + "-byte header)";

  if (!src.compressed()) {
    // Checked before allocating: a forged header cannot ask for more than the file has.
    const uint64_t size = fs::file_size(path, ec);
    if (ec) fail(path, "cannot read its size: " + ec.message());
    const uint64_t body = size - header;
    if (body < payload)
      fail(path, "truncated: " + promise + " but the file holds only " + std::to_string(body));
    if (body > payload)
      fail(path, promise + " but the file holds " + std::to_string(body - payload) + " more");
    out.bytes.resize(static_cast<size_t>(payload));
    const size_t n = src.read(out.bytes.data(), out.bytes.size());
    if (n < payload) fail(path, "truncated while reading: " + promise + ", got " + std::to_string(n));
    return out;
  }

  // Compressed: grow with the data actually there, so a lying header fails at the end of
  // the stream, having allocated no more than the stream held.
  if (payload > std::numeric_limits<size_t>::max() / 2) fail(path, promise + ", more than memory can hold");
  uint64_t have = 0;
  while (have < payload) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(payload - have, kGrowthBytes));
    out.bytes.resize(static_cast<size_t>(have) + want);
    const size_t n = src.read(out.bytes.data() + have, want);
    have += n;
    if (n < want) {
      out.bytes.clear();
      out.bytes.shrink_to_fit();
      fail(path, "truncated: " + promise + " but the data ends after " + std::to_string(have));
    }
  }
  uint8_t extra[64];
  const size_t more = src.read(extra, sizeof extra);
  if (more > 0) fail(path, promise + " but the data goes on past them");
  return out;
}

}  // namespace

IdxImages read_idx_images(const std::string& path) {
  IdxData d = read_idx(path, 3, "idx3-ubyte images");
  constexpr uint64_t kMaxSide = 1 << 16;
  if (d.dims[1] > kMaxSide || d.dims[2] > kMaxSide)
    fail(path, "implausible image size " + std::to_string(d.dims[1]) + "x" + std::to_string(d.dims[2]));
  IdxImages out;
  out.count = static_cast<int64_t>(d.dims[0]);
  out.rows = static_cast<int64_t>(d.dims[1]);
  out.cols = static_cast<int64_t>(d.dims[2]);
  out.pixels = std::move(d.bytes);
  return out;
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  return read_idx(path, 1, "idx1-ubyte labels").bytes;
}

ImageDataset load_idx_pair(const std::string& images_path, const std::string& labels_path, int num_classes) {
  IdxImages images = read_idx_images(images_path);
  std::vector<uint8_t> raw = read_idx_labels(labels_path);
  if (static_cast<int64_t>(raw.size()) != images.count)
    throw std::runtime_error(images_path + " holds " + std::to_string(images.count) + " images but " +
                             labels_path + " holds " + std::to_string(raw.size()) + " labels");
  std::vector<int32_t> labels(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] >= num_classes)
      throw std::runtime_error(labels_path + ": label " + std::to_string(raw[i]) + " of sample " +
                               std::to_string(i) + " is outside [0, " + std::to_string(num_classes) + ")");
    labels[i] = raw[i];
  }
  return ImageDataset(1, images.rows, images.cols, num_classes, std::move(images.pixels), std::move(labels),
                      kFashionMnistNormalization);
}

namespace {

std::string find_in(const fs::path& dir, const std::string& base) {
  std::error_code ec;
  for (const std::string& name : {base, base + ".gz"})
    if (fs::is_regular_file(dir / name, ec)) return (dir / name).string();
  throw std::runtime_error("dataset folder " + dir.string() + " has no " + base + " (nor " + base +
                           ".gz); an MNIST-format folder holds train-images-idx3-ubyte, "
                           "train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, "
                           "each plain or gzipped");
}

}  // namespace

DatasetSplits load_idx_folder(const std::string& dir, int num_classes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw std::runtime_error("dataset folder " + dir +
                             " does not exist; install the Debian package dataset-fashion-mnist "
                             "(apt-get install dataset-fashion-mnist) or name an MNIST-format folder");
  const fs::path d(dir);
  DatasetSplits out;
  out.train = load_idx_pair(find_in(d, "train-images-idx3-ubyte"), find_in(d, "train-labels-idx1-ubyte"),
                            num_classes);
  out.test = load_idx_pair(find_in(d, "t10k-images-idx3-ubyte"), find_in(d, "t10k-labels-idx1-ubyte"),
                           num_classes);
  if (out.train.height() != out.test.height() || out.train.width() != out.test.width())
    throw std::runtime_error("dataset folder " + dir + ": training images are " +
                             std::to_string(out.train.height()) + "x" + std::to_string(out.train.width()) +
                             " but test images are " + std::to_string(out.test.height()) + "x" +
                             std::to_string(out.test.width()));
  return out;
}

}  // namespace quartet::workloads

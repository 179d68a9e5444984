#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace quartet::engine {

// The format is little-endian; we write and read floats as they lie in memory.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

namespace {

using Json = nlohmann::ordered_json;  // keeps the file's key order in the header we write

// Our header nests three deep ({ name: { shape: [ ] } }); anything deeper is refused
// while parsing, so a hostile header cannot make the parser build a deep tree.
constexpr int kMaxJsonDepth = 8;

[[noreturn]] void throw_system(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

// Closes the descriptor on every path out.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_system("cannot write", path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void read_all_at(int fd, char* p, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_system("cannot read", path);
    }
    if (r == 0) throw std::runtime_error("cannot read " + path + ": file ended early (was it truncated while being read?)");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

std::string header_for(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) throw std::invalid_argument("save_safetensors: a tensor has an empty name");
    if (name == "__metadata__")
      throw std::invalid_argument("save_safetensors: \"__metadata__\" is reserved and cannot name a tensor");
    if (!seen.insert(name).second)
      throw std::invalid_argument("save_safetensors: tensor name '" + name + "' appears twice");
    if (!t.defined()) throw std::invalid_argument("save_safetensors: tensor '" + name + "' is undefined");
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", t.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad so that 8 + header length, where the data starts, is a multiple of 8.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string header = header_for(tensors, metadata);
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  try {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) throw_system("cannot open", tmp);
    char size_le[8];
    const uint64_t n = header.size();
    std::memcpy(size_le, &n, 8);
    write_all(fd.get(), size_le, 8, tmp);
    write_all(fd.get(), header.data(), header.size(), tmp);
    for (const auto& [name, t] : tensors) {
      const HostValues values(t);  // a tensor on a GPU is copied to the host to be written
      write_all(fd.get(), reinterpret_cast<const char*>(values.span().data()),
                static_cast<size_t>(t.numel()) * sizeof(float), tmp);
    }
    if (::fsync(fd.get()) != 0) throw_system("cannot fsync", tmp);
    if (::close(fd.release()) != 0) throw_system("cannot close", tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw_system("cannot rename " + tmp + " to", path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable; best effort, the file is complete either way.
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) ::fsync(dir_fd.get());
}

namespace {

struct Entry {
  std::string name;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

std::string region_str(const Entry& e) {
  return "'" + e.name + "' [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ")";
}

Entry parse_entry(const std::string& name, const Json& j, uint64_t data_size, const std::string& where) {
  const std::string at = where + ": tensor '" + name + "': ";
  if (!j.is_object()) throw std::invalid_argument(at + "expected an object with dtype, shape and data_offsets");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!j.contains(key)) throw std::invalid_argument(at + "missing \"" + key + "\"");

  const Json& dtype = j["dtype"];
  if (!dtype.is_string()) throw std::invalid_argument(at + "dtype is not a string");
  if (dtype.get<std::string>() != "F32")
    throw std::invalid_argument(at + "dtype " + dtype.get<std::string>() +
                                " is not supported; Quartet reads F32 only (in PyTorch, "
                                "convert with tensor.float() before saving)");

  Entry e;
  e.name = name;
  const Json& shape = j["shape"];
  if (!shape.is_array()) throw std::invalid_argument(at + "shape is not an array");
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw std::invalid_argument(at + "shape has " + std::to_string(shape.size()) + " dims; at most " +
                                std::to_string(kMaxDims) + " are supported");
  // numel * 4 must fit the data section; multiply with overflow checks.
  uint64_t bytes = sizeof(float);
  for (const Json& d : shape) {
    if (d.is_number_unsigned()) {
      e.shape.push_back(0);
    } else if (d.is_number_integer()) {
      throw std::invalid_argument(at + "shape " + shape.dump() + " has a negative size");
    } else {
      throw std::invalid_argument(at + "shape " + shape.dump() + " has a size that is not an integer");
    }
    const uint64_t v = d.get<uint64_t>();
    if (v > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, v, &bytes))
      throw std::invalid_argument(at + "shape " + shape.dump() + " is too large");
    e.shape.back() = static_cast<int64_t>(v);
  }

  const Json& offsets = j["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    throw std::invalid_argument(at + "data_offsets " + offsets.dump() +
                                " is not [begin, end] with non-negative integers");
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end)
    throw std::invalid_argument(at + "data_offsets " + offsets.dump() + " has begin > end");
  if (e.end > data_size)
    throw std::invalid_argument(at + "data_offsets " + offsets.dump() + " run past the data section (" +
                                std::to_string(data_size) + " bytes)");
  if (e.end - e.begin != bytes)
    throw std::invalid_argument(at + "data_offsets " + offsets.dump() + " span " +
                                std::to_string(e.end - e.begin) + " bytes, but shape " +
                                shape_str(e.shape) + " of F32 needs " + std::to_string(bytes));
  return e;
}

// Weights that are not numbers give exit 0 and garbage out (a mask of background, an
// accuracy of chance): refused where they enter.
void check_finite(const std::string& name, const Tensor& t, const std::string& where) {
  const float* v = t.data();
  const int64_t n = t.numel();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i]) && bad++ == 0) first = i;
  if (bad > 0)
    throw std::invalid_argument(where + ": tensor '" + name + "' holds " + std::to_string(bad) + " of " +
                                std::to_string(n) + " values that are not finite (NaN or infinite; the first at index " +
                                std::to_string(first) + " is " + std::to_string(v[first]) +
                                "); allowed: finite weights only");
}

}  // namespace

SafetensorsFile read_safetensors(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw_system("cannot open", path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) throw_system("cannot stat", path);
  if (!S_ISREG(st.st_mode)) throw std::invalid_argument(path + ": not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  const std::string where = "safetensors file " + path;

  if (file_size < 8)
    throw std::invalid_argument(where + ": " + std::to_string(file_size) +
                                " bytes, shorter than the 8-byte header length it must start with");
  char size_le[8];
  read_all_at(fd.get(), size_le, 8, 0, path);
  uint64_t header_size;
  std::memcpy(&header_size, size_le, 8);
  if (header_size > static_cast<uint64_t>(kMaxSafetensorsHeaderBytes))
    throw std::invalid_argument(where + ": header length " + std::to_string(header_size) +
                                " is over the " + std::to_string(kMaxSafetensorsHeaderBytes) +
                                "-byte limit (is this a safetensors file?)");
  if (header_size > file_size - 8)
    throw std::invalid_argument(where + ": header length " + std::to_string(header_size) +
                                " runs past the end of the file (" + std::to_string(file_size) +
                                " bytes); it is truncated or not safetensors");

  std::string text(header_size, '\0');
  read_all_at(fd.get(), text.data(), text.size(), 8, path);
  const uint64_t data_start = 8 + header_size;
  const uint64_t data_size = file_size - data_start;
  SafetensorsFile out;
  std::vector<Entry> entries;
  try {
    // Each tensor's entry is checked as soon as it is parsed and then dropped from the
    // tree, so the parsed object holds only "__metadata__": memory and time grow linearly
    // with the entries, and a header with too many is refused once it passes the limit.
    // The parsed object would keep only the last of two equal keys; refuse them here.
    std::set<std::string> names;
    std::string key;  // the top-level key whose value is being parsed
    Json header = Json::parse(text, [&](int depth, Json::parse_event_t event, Json& parsed) {
      if (depth > kMaxJsonDepth)
        throw std::invalid_argument(where + ": header JSON nests deeper than " +
                                    std::to_string(kMaxJsonDepth) + " levels");
      if (event == Json::parse_event_t::key && depth == 1) {
        key = parsed.get<std::string>();
        if (!names.insert(key).second) throw std::invalid_argument(where + ": header names '" + key + "' twice");
        if (names.size() > static_cast<size_t>(kMaxSafetensorsTensors) + names.count("__metadata__"))
          throw std::invalid_argument(where + ": header lists more than " +
                                      std::to_string(kMaxSafetensorsTensors) +
                                      " tensors; allowed: at most that many (a model's weights and an optimizer's "
                                      "state take far fewer)");
        return true;
      }
      const bool entry_done = depth == 1 && (event == Json::parse_event_t::object_end ||
                                             event == Json::parse_event_t::array_end ||
                                             event == Json::parse_event_t::value);
      if (!entry_done || key == "__metadata__") return true;
      entries.push_back(parse_entry(key, parsed, data_size, where));
      return false;  // checked: not kept in the tree
    });
    if (!header.is_object())
      throw std::invalid_argument(where + ": header is JSON but not an object (got " +
                                  std::string(header.type_name()) + ")");
    if (const auto meta = header.find("__metadata__"); meta != header.end()) {
      if (!meta->is_object())
        throw std::invalid_argument(where + ": \"__metadata__\" is not an object of strings");
      for (const auto& [k, v] : meta->items()) {
        if (!v.is_string())
          throw std::invalid_argument(where + ": \"__metadata__\" value for '" + k + "' is not a string");
        out.metadata[k] = v.get<std::string>();
      }
    }
  } catch (const Json::exception& e) {
    throw std::invalid_argument(where + ": header is not valid JSON: " + e.what());
  }

  // The spec: "the byte buffer needs to be entirely indexed, and cannot contain holes".
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < covered)
      throw std::invalid_argument(where + ": tensors " + region_str(entries[i - 1]) + " and " +
                                  region_str(e) + " overlap");
    if (e.begin > covered)
      throw std::invalid_argument(where + ": data bytes [" + std::to_string(covered) + ", " +
                                  std::to_string(e.begin) +
                                  ") belong to no tensor; the format allows no holes");
    covered = e.end;
  }
  if (covered != data_size)
    throw std::invalid_argument(where + ": data bytes [" + std::to_string(covered) + ", " +
                                std::to_string(data_size) +
                                ") at the end belong to no tensor; the format allows no holes");

  // Every size is now bounded by the file's, so allocating is safe.
  out.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape);
    read_all_at(fd.get(), reinterpret_cast<char*>(t.data()), e.end - e.begin, data_start + e.begin, path);
    check_finite(e.name, t, where);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

NamedTensors load_safetensors(const std::string& path) { return read_safetensors(path).tensors; }

namespace {

std::string mismatch_message(const std::string& source, const std::vector<std::string>& problems) {
  std::string msg = "load_state_dict from " + source + ": " + std::to_string(problems.size()) +
                    (problems.size() == 1 ? " problem" : " problems") + ", nothing loaded:";
  for (const auto& p : problems) msg += "\n  " + p;
  return msg;
}

}  // namespace

StateDictMismatch::StateDictMismatch(const std::string& source, std::vector<std::string> problems)
    : std::invalid_argument(mismatch_message(source, problems)), problems_(std::move(problems)) {}

std::string StateDictMismatch::brief() const {
  if (problems_.empty()) return what();
  std::string out = problems_.front();
  if (problems_.size() > 1)
    out += " (and " + std::to_string(problems_.size() - 1) + " more mismatch" + (problems_.size() > 2 ? "es" : "") + ")";
  return out;
}

void load_state_dict(Module& m, const NamedTensors& tensors, const std::string& source) {
  const NamedTensors expected = m.state_dict();
  std::unordered_map<std::string, const Tensor*> given;
  std::vector<std::string> problems;
  for (const auto& [name, t] : tensors)
    if (!given.emplace(name, &t).second) problems.push_back(name + ": appears twice in " + source);

  std::set<std::string> wanted;
  for (const auto& [name, dst] : expected) {
    wanted.insert(name);
    const auto it = given.find(name);
    if (it == given.end()) {
      problems.push_back(name + ": missing from file (model expects " + shape_str(dst.shape()) + ")");
    } else if (it->second->shape() != dst.shape()) {
      problems.push_back(name + ": file has shape " + shape_str(it->second->shape()) + ", model expects " +
                         shape_str(dst.shape()));
    }
  }
  for (const auto& [name, t] : tensors)
    if (!wanted.count(name))
      problems.push_back(name + ": in file (shape " + shape_str(t.shape()) + ") but not in the model");

  if (!problems.empty()) throw StateDictMismatch(source, std::move(problems));
  for (const auto& [name, dst] : expected) Tensor(dst).copy_from(*given.at(name));
}

void load_state_dict(Module& m, const std::string& path) { load_state_dict(m, load_safetensors(path), path); }

}  // namespace quartet::engine

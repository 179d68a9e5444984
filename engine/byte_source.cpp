#include "engine/byte_source.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace quartet::engine {
namespace {

// Bytes handed to one fread or gzread: gzread counts in unsigned int.
constexpr size_t kChunk = size_t{1} << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

}  // namespace

ByteSource::ByteSource(const std::string& path, bool gzipped) : path_(path) {
  if (gzipped) {
    gz_ = gzopen(path.c_str(), "rb");
    if (gz_) gzbuffer(gz_, 1 << 18);
  } else {
    file_ = std::fopen(path.c_str(), "rb");
  }
  if (!gz_ && !file_) fail(path, std::string("cannot open: ") + std::strerror(errno));
}

ByteSource::~ByteSource() {
  if (gz_) gzclose(gz_);
  if (file_) std::fclose(file_);
}

size_t ByteSource::read(void* dst, size_t n) {
  auto* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    const size_t want = std::min(n - done, kChunk);
    size_t got;
    if (gz_) {
      const int r = gzread(gz_, out + done, static_cast<unsigned>(want));
      if (r < 0) {
        int code = Z_OK;
        fail(path_, std::string("corrupt gzip data (") + gzerror(gz_, &code) + ")");
      }
      got = static_cast<size_t>(r);
    } else {
      got = std::fread(out + done, 1, want, file_);
      if (got < want && std::ferror(file_)) fail(path_, std::string("read error: ") + std::strerror(errno));
    }
    done += got;
    if (got < want) break;
  }
  // A gzip stream cut short reads as a short read plus a pending error.
  if (gz_ && done < n) {
    int code = Z_OK;
    const char* msg = gzerror(gz_, &code);
    if (code != Z_OK && code != Z_STREAM_END) fail(path_, std::string("corrupt or truncated gzip data (") + msg + ")");
  }
  return done;
}

bool ByteSource::skip(uint64_t n) {
  if (file_) return n == 0 || fseeko(file_, static_cast<off_t>(n), SEEK_CUR) == 0;
  std::vector<char> scratch(static_cast<size_t>(std::min<uint64_t>(n, kChunk)));
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, scratch.size()));
    if (read(scratch.data(), want) < want) return false;
    n -= want;
  }
  return true;
}

}  // namespace quartet::engine

#pragma once

// Sequential bytes of a file, plain or gzip-compressed, for the readers of files that may
// come from anywhere (idx, NIfTI): they read what a header promises a chunk at a time, so
// memory grows with the data a file really holds. A short read means the data ended; I/O
// errors and corrupt or truncated gzip data throw.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

struct gzFile_s;  // zlib's gzFile, kept out of this header

namespace quartet::engine {

class ByteSource {
 public:
  // Opens `path`, decompressing what is read when `gzipped`.
  // throws std::runtime_error "PATH: cannot open: REASON".
  ByteSource(const std::string& path, bool gzipped);
  ~ByteSource();
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  bool compressed() const { return gz_ != nullptr; }

  // Reads up to `n` bytes into `dst`: fewer only where the data ends.
  // throws std::runtime_error naming the path on a read error, or on gzip data that is
  // corrupt or ends inside its stream.
  size_t read(void* dst, size_t n);

  // Moves `n` bytes on: a gzipped file decompresses and drops them, and returns false
  // when its data ends first; a plain file seeks, and a read past its end comes back
  // short. throws as read.
  bool skip(uint64_t n);

 private:
  std::string path_;
  gzFile_s* gz_ = nullptr;
  std::FILE* file_ = nullptr;
};

}  // namespace quartet::engine

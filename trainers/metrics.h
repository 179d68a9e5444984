#pragma once

// The step record (docs/results.md, "Step record"): one JSON object per line in
// <arm>/roles/<role>.jsonl, flushed per record so a crash loses nothing written.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/device.h"
#include "engine/memory.h"

namespace quartet::trainers {

struct Evaluation {
  std::string metric = "accuracy";
  double value = 0.0;
  int64_t samples = 0;
  double seconds = 0.0;
};

struct StepRecord {
  int64_t step = 0;
  double epoch = 0.0;     // epoch-equivalents processed, fractional
  int64_t samples = 0;    // training samples processed so far by this role
  double wall = 0.0;      // seconds since the arm started (resumes continue the clock)
  double forward = 0.0, backward = 0.0, optimizer = 0.0;  // this step's compute, seconds
  double data = 0.0;      // batch assembly, seconds
  double comm_exposed = 0.0;  // communication not hidden under compute, seconds
  int64_t bytes_sent = 0, bytes_received = 0, messages = 0;  // cumulative
  double loss = 0.0;
  double lr = 0.0;
  std::optional<Evaluation> eval;
};

// The engine's tracked bytes as records carry them: per tag and `total`, each
// {"current", "peak"}.
nlohmann::json memory_json(const engine::MemStats& mem);
// A GPU's memory for a step record's "gpu_memory": by tag (current, peak), the caching
// allocator's allocated and reserved bytes with their peaks, the device's used and total
// (every process's), and the device's name.
nlohmann::json gpu_memory_json(const engine::Device& device);

// Serialises a record with memory figures `mem` (per tag current and peak; by default
// taken now) and this process's peak and current RSS.
nlohmann::json to_json(const StepRecord& r, const std::string& arm, const std::string& role, int rank,
                       const engine::MemStats& mem = engine::memory_stats());

// Peak resident set size of this program (since its execve), bytes; never below the
// current one.
int64_t peak_rss_bytes();
// Resident set size of this process now, bytes (0 where /proc is missing).
int64_t current_rss_bytes();

// Appends JSON lines to a file, flushing each one.
// The bytes of the complete lines at the start of `path` that are JSON objects, up to the
// first that is not and at most `limit`: what is left intact of a record file whose end
// a crash or a power loss tore (a partial line, blocks of NUL bytes).
int64_t intact_records_bytes(const std::string& path, int64_t limit);

class JsonlWriter {
 public:
  // Opens for append, after the file's intact records (intact_records_bytes): with
  // `keep_bytes` (resume) at most that many, so records past a checkpoint are dropped.
  explicit JsonlWriter(const std::string& path, std::optional<int64_t> keep_bytes = std::nullopt);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  // Appends one line and flushes it: a crash of this process loses nothing written.
  void write(const nlohmann::json& record);
  // Makes what was written durable (fsync): called before a checkpoint records bytes(),
  // so a power loss cannot leave the file shorter than a checkpoint says it is.
  void sync();
  int64_t bytes() const { return bytes_; }  // file size after the last write

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  int64_t bytes_ = 0;
};

// Wall-clock seconds since construction.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void restart() { start_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace quartet::trainers

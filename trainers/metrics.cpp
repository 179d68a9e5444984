#include "trainers/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "engine/cpu/conv_kernel.h"
#include "engine/cpu/kernel_cache.h"
#include "engine/device_memory.h"

namespace quartet::trainers {

int64_t current_rss_bytes() {
  // statm: size resident shared text lib data dt, in pages
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return got == 2 ? resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

int64_t peak_rss_bytes() {
  // VmHWM, this program's own high-water mark: getrusage's ru_maxrss survives execve, so
  // a process started by a large one (torchrun's Python agent) would report its parent's.
  int64_t peak = 0;
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    long long kib = 0;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) peak = kib * 1024;
    std::fclose(f);
  }
  // Read after the peak, the current size may have grown past it.
  return std::max(peak, current_rss_bytes());
}

nlohmann::json memory_json(const engine::MemStats& mem) {
  nlohmann::json memory = nlohmann::json::object();
  for (int i = 0; i < engine::kMemTagCount; ++i)
    memory[std::string(engine::mem_tag_name(static_cast<engine::MemTag>(i)))] = {
        {"current", mem.current[i]}, {"peak", mem.peak[i]}, {"at_total_peak", mem.at_total_peak[i]}};
  memory["total"] = {{"current", mem.total_current}, {"peak", mem.total_peak}};
  return memory;
}

nlohmann::json gpu_memory_json(const engine::Device& device) {
  const engine::DeviceMemStats s = engine::device_memory_stats(device);
  nlohmann::json memory = {{"device", device.str()}};
  for (int i = 0; i < engine::kMemTagCount; ++i)
    memory[std::string(engine::mem_tag_name(static_cast<engine::MemTag>(i)))] = {
        {"current", s.allocator.current[i]}, {"peak", s.allocator.peak[i]}};
  memory["allocated"] = s.allocator.allocated;
  memory["allocated_peak"] = s.allocator.allocated_peak;
  memory["reserved"] = s.allocator.reserved;
  memory["reserved_peak"] = s.allocator.reserved_peak;
  memory["device_used"] = s.device_used;
  memory["device_total"] = s.device_total;
  return memory;
}

nlohmann::json to_json(const StepRecord& r, const std::string& arm, const std::string& role, int rank,
                       const engine::MemStats& mem) {
  using nlohmann::json;
  const int64_t rss = current_rss_bytes();
  json j = {
      {"type", "step"},
      {"arm", arm},
      {"role", role},
      {"rank", rank},
      {"step", r.step},
      {"epoch", r.epoch},
      {"samples", r.samples},
      {"wall", r.wall},
      {"compute", {{"forward", r.forward}, {"backward", r.backward}, {"optimizer", r.optimizer}}},
      {"data", r.data},
      {"comm_exposed", r.comm_exposed},
      {"bytes_sent", r.bytes_sent},
      {"bytes_received", r.bytes_received},
      {"messages", r.messages},
      {"memory", memory_json(mem)},
      {"rss_peak", std::max(peak_rss_bytes(), rss)},
      {"rss", rss},
      {"gpu_memory", nullptr},
      {"loss", r.loss},
      {"lr", r.lr},
      {"kernel_tuning", engine::cpu::kernel_tuning_seconds()},
  };
  if (r.eval) {
    j["eval"] = {{"metric", r.eval->metric}, {"value", r.eval->value},
                 {"samples", r.eval->samples}, {"seconds", r.eval->seconds}};
    // What this process chose per conv shape so far, and whence: the machine's table
    // ("cache"), a measurement it made for the table ("measured"), or under
    // QUARTET_CONV_KERNEL=measure for itself ("measured here").
    json chosen = json::array();
    for (const engine::cpu::KernelChoice& m : engine::cpu::conv_kernel_choices())
      chosen.push_back({{"shape", m.shape}, {"kernel", m.kernel}, {"source", m.source}, {"seconds", m.seconds}});
    if (!chosen.empty()) j["conv_kernels"] = chosen;
  }
  return j;
}

int64_t intact_records_bytes(const std::string& path, int64_t limit) {
  std::ifstream in(path, std::ios::binary);
  int64_t bytes = 0;
  std::string line;
  while (bytes < limit && std::getline(in, line) && !in.eof()) {
    const int64_t next = bytes + static_cast<int64_t>(line.size()) + 1;
    if (next > limit) break;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) break;
    bytes = next;
  }
  return bytes;
}

JsonlWriter::JsonlWriter(const std::string& path, std::optional<int64_t> keep_bytes) : path_(path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec) {
    // A crash or a power loss may have torn the end (a partial line, blocks of NUL bytes):
    // new records follow the last intact one, never garbage.
    const int64_t keep = intact_records_bytes(path, keep_bytes.value_or(static_cast<int64_t>(size)));
    if (static_cast<uintmax_t>(keep) != size) std::filesystem::resize_file(path, static_cast<uintmax_t>(keep), ec);
    if (ec) throw std::runtime_error(path + ": cannot truncate to its last intact record: " + ec.message());
  }
  file_ = std::fopen(path.c_str(), "ab");
  if (!file_) throw std::runtime_error(path + ": cannot open for writing: " + std::strerror(errno));
  std::fseek(file_, 0, SEEK_END);
  bytes_ = std::ftell(file_);
}

JsonlWriter::~JsonlWriter() {
  if (file_) std::fclose(file_);
}

void JsonlWriter::sync() {
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0)
    throw std::runtime_error(path_ + ": cannot flush to disk: " + std::strerror(errno));
}

void JsonlWriter::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw std::runtime_error(path_ + ": write failed: " + std::strerror(errno));
  bytes_ += static_cast<int64_t>(line.size());
}

}  // namespace quartet::trainers

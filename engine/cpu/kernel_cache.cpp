#include "engine/cpu/kernel_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#ifndef QUARTET_KERNEL_BUILD
#define QUARTET_KERNEL_BUILD "unknown build"
#endif

namespace quartet::engine::cpu {
namespace {

namespace fs = std::filesystem;

// Seconds this process spent choosing kernels (measuring, or waiting for another
// process's measurement), in nanoseconds.
std::atomic<int64_t> tuning_nanoseconds{0};
using nlohmann::json;

// What a kernel's speed depends on: the CPU (model and the vector flags) and the code.
std::string machine_key() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown cpu";
  std::set<std::string> flags;
  const std::set<std::string> relevant = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
                                          "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16", "amx_tile"};
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0 && model == "unknown cpu") model = line.substr(line.find(':') + 2);
    if (line.rfind("flags", 0) == 0 && flags.empty()) {
      std::istringstream words(line.substr(line.find(':') + 1));
      for (std::string w; words >> w;)
        if (relevant.count(w)) flags.insert(w);
    }
  }
  std::string key = model + " |";
  for (const std::string& f : flags) key += " " + f;
  return key + " | " + QUARTET_KERNEL_BUILD;
}

std::string hex_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

struct Entry {
  std::string kernel;
  std::vector<std::pair<std::string, double>> seconds;
};

struct Table {
  std::mutex mutex;
  bool loaded = false;
  bool usable = true;     // a file can be kept (a folder to write in)
  std::string key, path;
  std::map<std::string, Entry> entries;  // op + "|" + shape
  std::vector<KernelChoice> log;
  std::set<std::string> logged;
  bool remeasure = false;          // remeasure_kernels()
  std::set<std::string> measured;  // (op, shape)s this process measured
};

Table& table() {
  static Table t;
  return t;
}

void warn(const std::string& text) { std::fprintf(stderr, "quartet: %s\n", text.c_str()); }

// The file's entries when it is this machine's and parses; warns once otherwise.
std::map<std::string, Entry> read_file(const Table& t, bool& warned) {
  std::map<std::string, Entry> out;
  std::ifstream in(t.path);
  if (!in) return out;
  std::stringstream text;
  text << in.rdbuf();
  const json j = json::parse(text.str(), nullptr, false);
  const bool ours = j.is_object() && j.value("machine", "") == t.key && j.contains("kernels") && j["kernels"].is_object();
  if (!ours) {
    if (!warned)
      warn("kernel cache " + t.path + (j.is_discarded() || !j.is_object() ? " does not parse" : " is another machine's or build's") +
           "; it is set aside and the kernels are measured anew");
    warned = true;
    return out;
  }
  for (const auto& [name, e] : j["kernels"].items()) {
    if (!e.is_object() || !e.contains("kernel") || !e["kernel"].is_string()) continue;
    Entry entry{e["kernel"].get<std::string>(), {}};
    if (e.contains("seconds") && e["seconds"].is_object())
      for (const auto& [k, s] : e["seconds"].items())
        if (s.is_number()) entry.seconds.emplace_back(k, s.get<double>());
    out.emplace(name, std::move(entry));
  }
  return out;
}

bool write_file(const Table& t) {
  json kernels = json::object();
  for (const auto& [name, e] : t.entries) {
    json seconds = json::object();
    for (const auto& [k, s] : e.seconds) seconds[k] = s;
    kernels[name] = {{"kernel", e.kernel}, {"seconds", seconds}};
  }
  const json j = {{"machine", t.key}, {"kernels", kernels}};
  const std::string tmp = t.path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(1) << "\n";
    if (!out) return false;
  }
  std::error_code ec;
  fs::rename(tmp, t.path, ec);
  if (ec) fs::remove(tmp, ec);
  return !ec;
}

void load(Table& t) {
  if (t.loaded) return;
  t.loaded = true;
  t.key = machine_key();
  t.path = kernel_cache_path();
  std::error_code ec;
  fs::create_directories(fs::path(t.path).parent_path(), ec);
  if (ec || ::access(fs::path(t.path).parent_path().c_str(), W_OK) != 0) {
    warn("no folder to keep measured kernels in (" + fs::path(t.path).parent_path().string() +
         "); every process uses the fixed rule (set QUARTET_KERNEL_CACHE to a writable file)");
    t.usable = false;
    return;
  }
  bool warned = false;
  t.entries = read_file(t, warned);
}

// Holds the table's lock file while alive: one process measures a shape at a time.
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0)
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  bool held() const { return fd_ >= 0; }

 private:
  int fd_;
};

void note(Table& t, const std::string& op, const std::string& shape, const Entry& e, const char* source) {
  if (!t.logged.insert(op + "|" + shape).second) return;
  t.log.push_back({op, shape, e.kernel, source, e.seconds});
}

}  // namespace

double fastest_run(const std::function<double()>& run) {
  run();
  return std::min({run(), run(), run()});
}

std::string kernel_cache_path() {
  if (const char* p = std::getenv("QUARTET_KERNEL_CACHE"); p && *p) return p;
  fs::path base;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) base = x;
  else if (const char* h = std::getenv("HOME"); h && *h) base = fs::path(h) / ".cache";
  else base = fs::temp_directory_path();
  return (base / "quartet" / ("kernels-" + hex_hash(machine_key()) + ".json")).string();
}

std::string cached_kernel(const std::string& op, const std::string& shape, const std::vector<std::string>& candidates,
                          const std::function<double(const std::string&)>& time) {
  Table& t = table();
  std::lock_guard lock(t.mutex);  // threads of one process (ranks as threads) one at a time
  load(t);
  const std::string name = op + "|" + shape;
  const bool again = t.remeasure && time && !t.measured.count(name);
  if (auto it = t.entries.find(name); it != t.entries.end() && !again) {
    note(t, op, shape, it->second, t.measured.count(name) ? "measured" : "cache");
    return it->second.kernel;
  }
  if (!t.usable || candidates.size() == 1 || !time) return candidates.front();
  // From here on: waiting for another process's measurement, or measuring.
  struct Count {
    std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
    ~Count() {
      tuning_nanoseconds.fetch_add(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - since).count());
    }
  } count;
  FileLock file_lock(t.path);
  if (!file_lock.held()) return candidates.front();
  bool warned = true;  // said once already, at load
  for (auto& [n, e] : read_file(t, warned)) t.entries.insert_or_assign(n, std::move(e));
  if (auto it = t.entries.find(name); it != t.entries.end() && !again) {
    note(t, op, shape, it->second, "cache");
    return it->second.kernel;
  }
  Entry e;
  double best = 0.0;
  for (const std::string& k : candidates) {
    const double s = fastest_run([&] { return time(k); });
    e.seconds.emplace_back(k, s);
    if (e.kernel.empty() || s < best) e.kernel = k, best = s;
  }
  t.entries[name] = e;
  if (!write_file(t)) {
    // A choice other processes cannot read could differ from theirs: the rule then, here
    // and in them (they fail to write alike).
    warn("kernel cache " + t.path + ": cannot write it; every process uses the fixed rule");
    t.entries.erase(name);
    t.usable = false;
    return candidates.front();
  }
  t.measured.insert(name);
  t.logged.erase(name);  // a choice read before, now measured: logged anew
  std::erase_if(t.log, [&](const KernelChoice& c) { return c.op + "|" + c.shape == name; });
  note(t, op, shape, e, "measured");
  return e.kernel;
}

double kernel_tuning_seconds() { return static_cast<double>(tuning_nanoseconds.load()) * 1e-9; }

void remeasure_kernels() {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  t.remeasure = true;
}

std::vector<KernelChoice> kernel_choices() {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  return t.log;
}

}  // namespace quartet::engine::cpu

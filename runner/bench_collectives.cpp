#include "runner/bench_collectives.h"
#include "runner/process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <mutex>
#include <thread>

#include "runner/wiring.h"
#include "transport/collectives.h"
#include "transport/coordinator.h"
#include "transport/gloo_collectives.h"
#include "transport/hierarchical_collectives.h"
#include "transport/shm_collectives.h"
#include "transport/store.h"
#if QUARTET_WITH_NCCL
#include "transport/nccl/nccl_collectives.h"
#endif

extern char** environ;

namespace quartet::runner {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using transport::Collectives;

constexpr const char* kArm = "bench-collectives";

volatile std::sig_atomic_t g_interrupted = 0;
void on_signal(int) { g_interrupted = 1; }

// Ctrl-C or SIGTERM while ranks run: stop them and reap them before leaving.
class InterruptGuard {
 public:
  InterruptGuard() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~InterruptGuard() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

// ---------------------------------------------------------------------------------
// The parent: coordinator, rank processes, reaping.

struct RankProcess {
  pid_t pid = -1;
  int status = 0;
  bool done = false;
};



// Reaps every rank. Once one fails (or the deadline passes, or a rank vanishes) the
// others are stopped: SIGTERM, then SIGKILL after a grace period. Returns the first
// failure, empty when all exited 0.
std::string reap_ranks(std::vector<RankProcess>& ranks, Clock::time_point deadline,
                       const std::function<std::string()>& outside_failure) {
  std::string failure;
  Clock::time_point kill_at = Clock::time_point::max();
  bool terminated = false;
  for (;;) {
    bool all_done = true;
    for (size_t r = 0; r < ranks.size(); ++r) {
      RankProcess& p = ranks[r];
      if (p.done) continue;
      const pid_t got = waitpid(p.pid, &p.status, WNOHANG);
      if (got == p.pid || (got < 0 && errno == ECHILD)) {
        p.done = true;
        if (got == p.pid && !(WIFEXITED(p.status) && WEXITSTATUS(p.status) == 0) && failure.empty())
          failure = "rank " + std::to_string(r) + " failed (" + describe_exit(p.status) + ")";
      } else {
        all_done = false;
      }
    }
    if (all_done) return failure;
    const auto now = Clock::now();
    if (failure.empty()) failure = outside_failure();
    if (failure.empty() && g_interrupted) failure = "interrupted";
    if (failure.empty() && now > deadline) failure = "the benchmark ran past its timeout";
    if (!failure.empty() && !terminated) {
      for (auto& p : ranks)
        if (!p.done) kill(p.pid, SIGTERM);
      terminated = true;
      kill_at = now + 5s;
    }
    if (terminated && now > kill_at) {
      for (auto& p : ranks)
        if (!p.done) kill(p.pid, SIGKILL);
      kill_at = Clock::time_point::max();
    }
    std::this_thread::sleep_for(20ms);
  }
}


// ---------------------------------------------------------------------------------
// A rank: buffers, checks, timing.

// Host or device memory for one size. For NCCL the host copy stages uploads and checks.
class BenchBuffer {
 public:
  BenchBuffer(const std::string& backend, size_t floats) : host_(floats) {
#if QUARTET_WITH_NCCL
    // On the device the communicator made current on this thread.
    if (backend == "nccl") device_ = std::make_unique<transport::DeviceBuffer>(-1, floats);
#else
    (void)backend;
#endif
  }
  std::vector<float>& host() { return host_; }
  std::span<float> data() {
#if QUARTET_WITH_NCCL
    if (device_) return device_->span();
#endif
    return host_;
  }
  void upload() {
#if QUARTET_WITH_NCCL
    if (device_) device_->upload(host_);
#endif
  }
  void download() {
#if QUARTET_WITH_NCCL
    if (device_) device_->download(host_);
#endif
  }

 private:
#if QUARTET_WITH_NCCL
  std::unique_ptr<transport::DeviceBuffer> device_;
#endif
  std::vector<float> host_;
};

// A block of L in-place sums multiplies everything by N each time, so the values of a
// block are chosen to stay normal floats: rank r, element i starts at
// (r+1)(i%7+1) 2^-e and ends at (i%7+1) N(N+1)/2 N^(L-1) 2^-e. Checking the end of a
// block checks every all-reduce in it: a lost or doubled contribution anywhere is off
// by far more than the rounding (N-1) 2^-24 per step.
struct Block {
  int length = 0;
  int exponent = 0;
};

// binades: how far a block may grow, within the wire type's normal range (float: 100,
// half: 14, its values living in [2^-14, 2^15]).
std::vector<Block> plan_blocks(int iters, int ranks, int binades) {
  const double growth = std::log2(static_cast<double>(std::max(ranks, 2)));
  const int max_length = static_cast<int>(std::floor(binades / growth)) + 1;
  std::vector<Block> blocks;
  for (int left = iters; left > 0;) {
    Block b;
    b.length = std::min(left, max_length);
    b.exponent = static_cast<int>(std::ceil((b.length - 1) * growth));
    blocks.push_back(b);
    left -= b.length;
  }
  return blocks;
}

void fill_block(std::vector<float>& host, int rank, const Block& b) {
  const float scale = std::ldexp(1.0f, -b.exponent);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1)) * scale;
}

// Elements off by more than the tolerance after the block. On the half wire each of the
// block's all-reduces may round a value N times by 2^-11 of it.
int64_t count_wrong(const std::vector<float>& host, int ranks, const Block& b, transport::Wire wire) {
  const double n = ranks;
  const double base = n * (n + 1.0) / 2.0 * std::pow(n, b.length - 1) * std::ldexp(1.0, -b.exponent);
  const double tolerance = wire == transport::Wire::f16 ? b.length * n * std::ldexp(1.0, -11) : 1e-4;
  int64_t wrong = 0;
  for (size_t i = 0; i < host.size(); ++i) {
    const double expect = base * static_cast<double>(i % 7 + 1);
    if (!(std::fabs(host[i] - expect) <= tolerance * expect)) ++wrong;  // NaN counts as wrong
  }
  return wrong;
}

std::unique_ptr<Collectives> make_collectives(const BenchRankOptions& o, transport::CoordinatorStore& store) {
  if (o.backend == "gloo") {
    transport::GlooOptions go;
    go.hostname = o.gloo_host;
    return transport::make_gloo_collectives(store, o.rank, o.ranks, transport::gloo_options_from_environment(go));
  }
  if (o.backend == "shm")
    return transport::make_shm_collectives(store, o.rank, o.ranks, transport::shm_options_from_environment());
  if (o.backend == "hierarchical") {
    transport::GlooOptions go;
    go.hostname = o.gloo_host;
    return transport::make_hierarchical_collectives(
        store, o.rank, o.ranks, transport::host_key_from_environment(o.rank),
        {transport::shm_options_from_environment(), transport::gloo_options_from_environment(go)});
  }
#if QUARTET_WITH_NCCL
  if (o.backend == "nccl") return transport::make_nccl_collectives(store, o.rank, o.ranks);
#endif
  throw InputError("--backend " + o.backend + ": this build has no such backend");
}

}  // namespace

std::vector<int64_t> parse_byte_sizes(const std::string& list) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    int64_t mult = 1;
    const std::string suffix = end ? std::string(end) : "";
    if (suffix == "K" || suffix == "k") mult = 1 << 10;
    else if (suffix == "M" || suffix == "m") mult = 1 << 20;
    else if (suffix == "G" || suffix == "g") mult = int64_t{1} << 30;
    else if (!suffix.empty()) mult = 0;
    if (item.empty() || end == item.c_str() || mult == 0 || v <= 0)
      throw InputError("--sizes: \"" + item + "\" is not a size (examples: 4096, 1M, 64M, 1G)");
    const int64_t bytes = v * mult;
    if (bytes % 4 != 0) throw InputError("--sizes: " + item + " is not a whole number of floats (4 bytes each)");
    out.push_back(bytes);
    start = comma + 1;
  }
  return out;
}

std::vector<int> parse_rank_counts(const std::string& list) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || end == item.c_str() || *end != '\0' || v < 1 || v > 1024)
      throw InputError("--ranks: \"" + item + "\" is not a number of ranks from 1 to 1024 (examples: 2, 2,4)");
    out.push_back(static_cast<int>(v));
    start = comma + 1;
  }
  return out;
}

namespace {

// One table: `ranks` rank processes through a coordinator of their own. Returns the exit
// code, as bench_collectives_main.
int bench_with_ranks(const BenchCollectivesOptions& options, int ranks_count);

}  // namespace

int bench_collectives_main(const BenchCollectivesOptions& options) {
  if (options.backend != "gloo" && options.backend != "shm" && options.backend != "nccl")
    throw InputError("--backend: expected gloo, shm or nccl, got " + options.backend);
  if (options.op != "all_reduce" && options.op != "all_to_all")
    throw InputError("--op: expected all_reduce or all_to_all, got " + options.op);
  if (options.op == "all_to_all" && options.hierarchical)
    throw InputError("--op all_to_all: the hierarchical backend has no all-to-all; drop --hierarchical");
  if (options.op == "all_to_all" && options.dtype != "fp32")
    throw InputError("--op all_to_all moves floats as they are; --dtype fp16 is for all_reduce");
#if !QUARTET_WITH_NCCL
  if (options.backend == "nccl")
    throw InputError("--backend nccl: this quartet was built without NCCL (no CUDA toolkit found at build time)");
#endif
  const std::vector<int> counts = parse_rank_counts(options.ranks);
  if (options.iters < 1) throw InputError("--iters: expected at least 1, got " + std::to_string(options.iters));
  if (options.warmup < 0) throw InputError("--warmup: expected 0 or more");
  if (options.dtype != "fp32" && options.dtype != "fp16")
    throw InputError("--dtype: expected fp32 or fp16, got " + options.dtype);
  if (options.dtype == "fp16" && options.backend == "nccl")
    throw InputError("--dtype fp16: backend nccl has no fp16 wire here (gloo and shm have)");
  if (options.hierarchical && options.backend != "gloo")
    throw InputError("--hierarchical: it runs shm within a host and gloo between hosts; drop --backend " +
                     options.backend);
  if (options.hosts != 0 && !options.hierarchical)
    throw InputError("--hosts: simulated hosts are for --hierarchical; add it, or drop --hosts");
  const int fewest = *std::min_element(counts.begin(), counts.end());
  if (options.hosts < 0 || options.hosts > fewest)
    throw InputError("--hosts: expected 1 to the fewest --ranks (" + std::to_string(fewest) + "), got " +
                     std::to_string(options.hosts));
  for (const int64_t bytes : parse_byte_sizes(options.sizes))  // refuse bad input before any process starts
    for (const int n : counts)
      if (options.op == "all_to_all" && bytes % (4 * int64_t{n}) != 0)
        throw InputError("--sizes: " + std::to_string(bytes) + " bytes do not split into " + std::to_string(n) +
                         " equal chunks of floats, one for each rank of an all-to-all; use a multiple of " +
                         std::to_string(4 * n));
  for (size_t i = 0; i < counts.size(); ++i) {
    if (i > 0) std::printf("\n");
    std::fflush(stdout);
    if (const int code = bench_with_ranks(options, counts[i]); code != 0) return code;
  }
  return 0;
}

namespace {

int bench_with_ranks(const BenchCollectivesOptions& options, const int ranks_count) {
  const std::string backend = options.hierarchical ? "hierarchical" : options.backend;

  std::string vanished_why;
  std::mutex why_mutex;
  transport::CoordinatorOptions co;
  co.host = options.host;
  co.heartbeat_timeout = 60s;
  co.on_vanished = [&](const transport::RoleId& who, const std::string& why) {
    std::lock_guard lock(why_mutex);
    if (vanished_why.empty()) vanished_why = "rank " + who.name() + " vanished: " + why;
  };
  transport::Coordinator coordinator(co);
  coordinator.declare_arm(kArm, ranks_count);

  const std::filesystem::path exe = self_executable();
  g_interrupted = 0;
  InterruptGuard guard;
  std::vector<RankProcess> ranks(static_cast<size_t>(ranks_count));
  try {
    for (int r = 0; r < ranks_count; ++r) {
      SpawnOptions so;
      so.args = {kBenchCollectivesRankCommand, "--coordinator", coordinator.address(), "--backend", backend,
                 "--op", options.op,
                 "--rank", std::to_string(r), "--ranks", std::to_string(ranks_count), "--sizes", options.sizes,
                 "--dtype", options.dtype,
                 "--iters", std::to_string(options.iters), "--warmup", std::to_string(options.warmup),
                 "--gloo-host", options.host};
      so.env = {{"QUARTET_TOKEN", coordinator.token()}};
      if (options.hosts > 0) so.env["QUARTET_SIMULATED_HOSTS"] = std::to_string(options.hosts);
      ranks[r].pid = spawn_process(exe, so);
    }
  } catch (...) {
    for (auto& p : ranks)
      if (p.pid > 0) kill(p.pid, SIGKILL);
    for (auto& p : ranks)
      if (p.pid > 0) waitpid(p.pid, &p.status, 0);
    throw;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(options.timeout_s * 1000.0));
  auto why_vanished = [&] {
    std::lock_guard lock(why_mutex);
    return vanished_why;
  };
  std::string failure = reap_ranks(ranks, deadline, why_vanished);
  if (failure.empty()) failure = why_vanished();
  if (!failure.empty()) {
    std::cerr << "quartet bench-collectives: " << failure << "\n";
    return g_interrupted ? 130 : 1;
  }
  return 0;
}

// One size's timed all-reduces on one rank: the mean seconds per all-reduce, the wrong
// elements, and per level (a hierarchical backend) the bytes and seconds they took.
struct Timed {
  double seconds = 0.0;
  int64_t wrong = 0;
  std::vector<transport::CollectiveTotals> levels;
};

Timed time_all_reduce(Collectives& c, BenchBuffer& buffer, const std::vector<Block>& blocks, transport::Wire wire,
                      const BenchRankOptions& o) {
  // Warm-up on zeros: the values do not matter, only the connections and caches.
  std::fill(buffer.host().begin(), buffer.host().end(), 0.0f);
  buffer.upload();
  for (int i = 0; i < o.warmup; ++i) c.all_reduce(buffer.data(), transport::ReduceOp::sum, wire);
  Timed t;
  t.levels.resize(c.levels().size());
  for (const Block& b : blocks) {
    fill_block(buffer.host(), c.rank(), b);
    buffer.upload();
    c.barrier();
    const std::vector<transport::LevelTotals> before = c.levels();
    const auto t0 = Clock::now();
    for (int i = 0; i < b.length; ++i) c.all_reduce(buffer.data(), transport::ReduceOp::sum, wire);
    t.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    const std::vector<transport::LevelTotals> after = c.levels();
    for (size_t l = 0; l < after.size(); ++l) {
      t.levels[l].bytes += after[l].totals.bytes - before[l].totals.bytes;
      t.levels[l].seconds += after[l].totals.seconds - before[l].totals.seconds;
    }
    buffer.download();
    t.wrong += count_wrong(buffer.host(), c.size(), b, wire);
  }
  t.seconds /= o.iters;
  return t;
}

// On rank 0: the slowest rank's mean seconds, and the wrong elements over all ranks.
std::pair<double, int64_t> gather_timing(Collectives& c, const Timed& t) {
  std::vector<float> mine{static_cast<float>(t.seconds), static_cast<float>(t.wrong)};
  std::vector<float> all(2 * static_cast<size_t>(c.size()));
  c.all_gather(mine, all);
  double slowest = 0.0;
  int64_t wrong = 0;
  for (int r = 0; r < c.size(); ++r) {
    slowest = std::max(slowest, static_cast<double>(all[2 * r]));
    wrong += static_cast<int64_t>(all[2 * r + 1]);
  }
  return {slowest, wrong};
}

double gbps(int64_t bytes, double seconds) { return seconds > 0.0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0; }

void print_header(const Collectives& c, const BenchRankOptions& o, transport::Wire wire, bool levels) {
  const int n = c.size();
  std::printf("# quartet bench-collectives: all_reduce (%s sum, in place), backend %s, %d rank%s, %s\n",
              wire == transport::Wire::f16 ? "float32 buffers, fp16 wire," : "float32", c.backend(), n,
              n == 1 ? "" : "s", o.gloo_host.c_str());
  std::printf("# %d timed iterations per size after %d warm-up; time: the slowest rank's mean; "
              "busbw = algbw * 2(N-1)/N; every element of every block of iterations checked\n",
              o.iters, o.warmup);
  if (levels)
    std::printf("# per level, rank 0 (a host's leader): intra = shm all-reduce + broadcast within its host, inter = "
                "gloo ring between the hosts' leaders, busbw = that level's bytes / its seconds; flat: gloo over "
                "every rank\n");
  std::printf("#\n# %12s %12s %6s %6s %12s %12s %12s", "size(B)", "count", "type", "redop", "time(us)", "algbw(GB/s)",
              "busbw(GB/s)");
  if (levels) std::printf(" %12s %12s %12s", "intra(GB/s)", "inter(GB/s)", "flat(GB/s)");
  std::printf(" %6s\n", "check");
  std::fflush(stdout);
}

// All-to-all's values: rank q's element i for rank p, exact in float.
float a2a_value(int q, int p, int n, size_t i) {
  return static_cast<float>((q * n + p) % 8192 * 1024 + static_cast<int>(i % 1024));
}

// --op all_to_all: per size, a rank's buffer of N equal chunks (one for each rank) sent
// `iters` times after the warm-up, the output checked after the timed ones; rank 0
// prints the table. Returns whether every element on every rank was right.
bool all_to_all_table(Collectives& c, const BenchRankOptions& o, const std::vector<int64_t>& sizes) {
  const int n = c.size(), me = c.rank();
  const auto kind = transport::CollectiveKind::all_to_all;
  if (me == 0) {
    std::printf("# quartet bench-collectives: all_to_all (float32, equal chunks), backend %s, %d rank%s, %s\n",
                c.backend(), n, n == 1 ? "" : "s", o.gloo_host.c_str());
    std::printf("# %d timed iterations per size after %d warm-up; size: one rank's buffer, N chunks of size/N; "
                "time: the slowest rank's mean; busbw = algbw * (N-1)/N; every element received checked\n#\n",
                o.iters, o.warmup);
    std::printf("# %12s %12s %6s %6s %12s %12s %12s %6s\n", "size(B)", "count", "type", "redop", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)", "check");
    std::fflush(stdout);
  }
  bool all_ok = true;
  double busbw_sum = 0.0;
  for (const int64_t bytes : sizes) {
    const size_t count = static_cast<size_t>(bytes / 4), chunk = count / static_cast<size_t>(n);
    const std::vector<int64_t> counts(static_cast<size_t>(n), static_cast<int64_t>(chunk));
    BenchBuffer in(o.backend, count), out(o.backend, count);
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < chunk; ++i) in.host()[static_cast<size_t>(p) * chunk + i] = a2a_value(me, p, n, i);
    in.upload();
    for (int i = 0; i < o.warmup; ++i) c.all_to_all(in.data(), counts, out.data(), counts);
    std::fill(out.host().begin(), out.host().end(), -1.0f);
    out.upload();
    c.barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < o.iters; ++i) c.all_to_all(in.data(), counts, out.data(), counts);
    Timed mine;
    mine.seconds = std::chrono::duration<double>(Clock::now() - t0).count() / o.iters;
    out.download();
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < chunk; ++i) mine.wrong += out.host()[static_cast<size_t>(q) * chunk + i] != a2a_value(q, me, n, i);
    const auto [t, wrong] = gather_timing(c, mine);
    if (me != 0) continue;
    const double algbw = gbps(bytes, t), busbw = algbw * transport::bus_bandwidth_factor(kind, n);
    busbw_sum += busbw;
    all_ok = all_ok && wrong == 0;
    std::printf("  %12lld %12zu %6s %6s %12.1f %12.3f %12.3f %6s\n", static_cast<long long>(bytes), count, "float",
                "none", t * 1e6, algbw, busbw, wrong == 0 ? "ok" : "FAIL");
    if (wrong != 0) std::printf("#   %lld wrong elements over all ranks\n", static_cast<long long>(wrong));
    std::fflush(stdout);
  }
  if (me == 0) {
    std::printf("# Avg bus bandwidth: %.3f GB/s over %zu size%s\n", busbw_sum / static_cast<double>(sizes.size()),
                sizes.size(), sizes.size() == 1 ? "" : "s");
    std::fflush(stdout);
  }
  return all_ok;
}

}  // namespace

int bench_collectives_rank_main(const BenchRankOptions& o) {
  const std::vector<int64_t> sizes = parse_byte_sizes(o.sizes);
  const auto [host, port] = transport::parse_host_port(o.coordinator);
  transport::ClientOptions co;
  co.host = host;
  co.port = port;
  co.arm = kArm;
  co.role = "rank" + std::to_string(o.rank);
  co.requested_rank = o.rank;
  transport::CoordinatorClient client(co);
  transport::CoordinatorStore store(client, std::string(kArm) + "/" + o.backend + "/");
  std::unique_ptr<Collectives> c = make_collectives(o, store);
  // --hierarchical: flat gloo over the same ranks, for comparison.
  std::unique_ptr<Collectives> flat;
  if (o.backend == "hierarchical") {
    transport::CoordinatorStore flat_store(client, std::string(kArm) + "/flat/");
    BenchRankOptions fo = o;
    fo.backend = "gloo";
    flat = make_collectives(fo, flat_store);
  }
  if (o.op == "all_to_all") {
    const bool ok = all_to_all_table(*c, o, sizes);
    c->barrier();
    c.reset();
    client.leave();
    return ok ? 0 : 1;
  }
  const int n = c->size();
  const transport::Wire wire = o.dtype == "fp16" ? transport::Wire::f16 : transport::Wire::f32;
  const int64_t element = transport::wire_element_bytes(wire);
  const char* type = wire == transport::Wire::f16 ? "half" : "float";
  const std::vector<Block> blocks = plan_blocks(o.iters, n, wire == transport::Wire::f16 ? 14 : 100);

  if (c->rank() == 0) print_header(*c, o, wire, flat != nullptr);
  bool all_ok = true;
  double busbw_sum = 0.0;
  for (const int64_t bytes : sizes) {
    const size_t count = static_cast<size_t>(bytes / element);
    BenchBuffer buffer(o.backend, count);
    const Timed mine = time_all_reduce(*c, buffer, blocks, wire, o);
    auto [t, total_wrong] = gather_timing(*c, mine);
    double flat_busbw = 0.0;
    if (flat) {
      const Timed flat_mine = time_all_reduce(*flat, buffer, blocks, wire, o);
      const auto [flat_t, flat_wrong] = gather_timing(*flat, flat_mine);
      total_wrong += flat_wrong;
      flat_busbw = gbps(bytes, flat_t) * transport::bus_bandwidth_factor(transport::CollectiveKind::all_reduce, n);
    }
    if (c->rank() == 0) {
      const double algbw = gbps(bytes, t);
      const double busbw = algbw * transport::bus_bandwidth_factor(transport::CollectiveKind::all_reduce, n);
      busbw_sum += busbw;
      const bool ok = total_wrong == 0;
      all_ok = all_ok && ok;
      std::printf("  %12lld %12zu %6s %6s %12.1f %12.3f %12.3f", static_cast<long long>(bytes), count, type, "sum",
                  t * 1e6, algbw, busbw);
      if (flat)
        std::printf(" %12.3f %12.3f %12.3f", gbps(mine.levels[0].bytes, mine.levels[0].seconds),
                    gbps(mine.levels[1].bytes, mine.levels[1].seconds), flat_busbw);
      std::printf(" %6s\n", ok ? "ok" : "FAIL");
      if (!ok) std::printf("#   %lld wrong elements over all ranks\n", static_cast<long long>(total_wrong));
      std::fflush(stdout);
    }
  }
  if (c->rank() == 0) {
    std::printf("# Avg bus bandwidth: %.3f GB/s over %zu size%s\n", busbw_sum / static_cast<double>(sizes.size()),
                sizes.size(), sizes.size() == 1 ? "" : "s");
    std::fflush(stdout);
  }
  // Everyone has printed or checked before anyone tears the group down.
  c->barrier();
  if (flat) flat->barrier();
  flat.reset();
  c.reset();
  client.leave();
  return all_ok ? 0 : 1;
}

BenchCollectivesCommands add_bench_collectives_commands(CLI::App& app, BenchCollectivesOptions& bench,
                                                        BenchRankOptions& rank) {
  BenchCollectivesCommands out;
  out.bench = app.add_subcommand("bench-collectives",
                                 "All-reduce or all-to-all bandwidth of the collectives over N local rank processes "
                                 "(nccl-tests' columns, every result checked)");
  out.bench->add_option("--backend", bench.backend, "gloo (CPU, TCP), shm (CPU, shared memory) or nccl (GPU)")
      ->check(CLI::IsMember({"gloo", "shm", "nccl"}));
  out.bench->add_flag("--hierarchical", bench.hierarchical,
                      "the hierarchical all-reduce (shm within a host, gloo between hosts), busbw per level beside "
                      "flat gloo's");
  out.bench->add_option("--hosts", bench.hosts, "with --hierarchical: spread the ranks over this many simulated hosts")
      ->check(CLI::PositiveNumber);
  out.bench->add_option("--op", bench.op,
                        "all_reduce (in place), or all_to_all (a rank's buffer: equal chunks, one for each rank)")
      ->check(CLI::IsMember({"all_reduce", "all_to_all"}));
  out.bench->add_option("--ranks", bench.ranks, "rank processes; a list (2,4) prints a table for each");
  out.bench->add_option("--sizes", bench.sizes, "buffer sizes in bytes, comma-separated (K, M, G = 1024^n)");
  out.bench->add_option("--dtype", bench.dtype, "what travels: fp32, or fp16 (float buffers sent as halves; gloo, shm)")
      ->check(CLI::IsMember({"fp32", "fp16"}));
  out.bench->add_option("--iters", bench.iters, "timed all-reduces per size")->check(CLI::PositiveNumber);
  out.bench->add_option("--warmup", bench.warmup, "untimed all-reduces per size first")->check(CLI::NonNegativeNumber);
  out.bench->add_option("--host", bench.host, "address of the coordinator and the ranks' Gloo devices");
  out.bench->add_option("--timeout", bench.timeout_s, "seconds before the ranks are stopped")
      ->check(CLI::PositiveNumber);

  out.rank = app.add_subcommand(kBenchCollectivesRankCommand, "one rank of bench-collectives (internal)");
  out.rank->group("");  // hidden from --help
  out.rank->add_option("--coordinator", rank.coordinator, "HOST:PORT")->required();
  out.rank->add_option("--backend", rank.backend);
  out.rank->add_option("--op", rank.op);
  out.rank->add_option("--rank", rank.rank)->required();
  out.rank->add_option("--ranks", rank.ranks)->required();
  out.rank->add_option("--sizes", rank.sizes);
  out.rank->add_option("--dtype", rank.dtype);
  out.rank->add_option("--iters", rank.iters);
  out.rank->add_option("--warmup", rank.warmup);
  out.rank->add_option("--gloo-host", rank.gloo_host);
  return out;
}

}  // namespace quartet::runner

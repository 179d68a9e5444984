// Collectives as a training step issues them: small and large all-reduces in turn, a
// one-float all-reduce (a clipped gradient's norm), ZeRO's reduce-scatter and
// all-gather, ring attention's shift of a key/value block to the next rank, at 2, 3 and 4
// ranks on every CPU backend. Each result is checked exactly,
// and no operation may take many times what it takes alone in a fresh group: an
// operation that stalls behind another (flat Gloo's large all-reduce after a small one
// once took 1 s per MiB at 3 and more ranks, 500 times its lone time) fails here.
// Timed, so multirank: run serially, with nothing else competing for the cores.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "tests/transport/ranks_as_threads.h"

namespace quartet::transport {
namespace {

using Clock = std::chrono::steady_clock;

float value(int rank, size_t i) { return static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1)); }
float summed(int ranks, size_t i) { return static_cast<float>(ranks * (ranks + 1) / 2 * static_cast<int>(i % 7 + 1)); }

struct Op {
  std::string name;
  CollectiveKind kind;
  size_t floats;  // the whole buffer (reduce-scatter's input, all-gather's output, rounded to the ranks)
};

// One step of data_parallel with clipping and ZeRO 2 as the collectives see it.
const std::vector<Op> kStep = {
    {"all_reduce 4 KiB", CollectiveKind::all_reduce, 1024},
    {"all_reduce 8 MiB", CollectiveKind::all_reduce, size_t{2} << 20},
    {"all_reduce 1 float", CollectiveKind::all_reduce, 1},
    {"reduce_scatter 2 MiB", CollectiveKind::reduce_scatter, size_t{1} << 19},
    {"all_gather 2 MiB", CollectiveKind::all_gather, size_t{1} << 19},
    {"all_reduce 64 KiB", CollectiveKind::all_reduce, 16384},
    {"all_reduce 1.5 MiB", CollectiveKind::all_reduce, 393216},
    {"broadcast 1 MiB", CollectiveKind::broadcast, size_t{1} << 18},
    {"barrier", CollectiveKind::barrier, 0},
    {"send_recv 1 MiB", CollectiveKind::send_recv, size_t{1} << 18},
};

// One step of expert_parallel: the dispatch and combine all-to-alls of two layers (chunks
// of different sizes per peer), between the reducer's all-reduces.
const std::vector<Op> kExpertStep = {
    {"all_to_all 256 KiB", CollectiveKind::all_to_all, size_t{1} << 16},
    {"all_reduce 4 KiB", CollectiveKind::all_reduce, 1024},
    {"all_to_all 4 MiB", CollectiveKind::all_to_all, size_t{1} << 20},
    {"all_to_all 16 KiB", CollectiveKind::all_to_all, 4096},
    {"all_reduce 8 MiB", CollectiveKind::all_reduce, size_t{2} << 20},
    {"all_to_all 1 float a peer", CollectiveKind::all_to_all, 1},
    {"all_gather 2 MiB", CollectiveKind::all_gather, size_t{1} << 19},
    {"all_to_all 2 MiB", CollectiveKind::all_to_all, size_t{1} << 19},
};

// The all-to-all chunk rank q sends rank p: about floats / N, uneven (one pair sends a
// third more, another a third less), at least one float.
size_t a2a_chunk(size_t floats, int n, int q, int p) {
  const size_t base = std::max<size_t>(1, floats / static_cast<size_t>(n));
  const int skew = (q + p) % 3;  // 0: base, 1: 4/3, 2: 2/3
  return skew == 0 ? base : skew == 1 ? base + base / 3 : std::max<size_t>(1, base - base / 3);
}
float a2a_value(int q, int p, size_t i) { return static_cast<float>(q * 4096 + p * 256 + static_cast<int>(i % 256)); }

// Runs op once on this rank and checks its result exactly; returns its seconds.
double run_checked(Collectives& c, const Op& op) {
  const int n = c.size(), r = c.rank();
  const bool chunked = op.kind == CollectiveKind::reduce_scatter || op.kind == CollectiveKind::all_gather;
  const size_t count = chunked ? op.floats / static_cast<size_t>(n) * static_cast<size_t>(n) : op.floats;
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = value(r, i);
  const size_t k = count / static_cast<size_t>(n);
  std::vector<float> gathered(op.kind == CollectiveKind::all_gather || op.kind == CollectiveKind::send_recv ? count : 0);
  const int from = (r + n - 1) % n;
  std::vector<int64_t> send, recv;
  std::vector<float> received;
  if (op.kind == CollectiveKind::all_to_all) {
    data.clear();
    for (int p = 0; p < n; ++p) {
      send.push_back(static_cast<int64_t>(a2a_chunk(op.floats, n, r, p)));
      recv.push_back(static_cast<int64_t>(a2a_chunk(op.floats, n, p, r)));
      for (size_t i = 0; i < static_cast<size_t>(send.back()); ++i) data.push_back(a2a_value(r, p, i));
    }
    received.resize(static_cast<size_t>(std::accumulate(recv.begin(), recv.end(), int64_t{0})));
  }
  const Clock::time_point start = Clock::now();
  switch (op.kind) {
    case CollectiveKind::all_reduce: c.all_reduce(data); break;
    case CollectiveKind::reduce_scatter: c.reduce_scatter(data); break;
    case CollectiveKind::all_gather: c.all_gather(std::span<const float>(data).first(k), gathered); break;
    case CollectiveKind::broadcast: c.broadcast(data, n - 1); break;
    case CollectiveKind::barrier: c.barrier(); break;
    case CollectiveKind::send_recv: c.send_recv(data, (r + 1) % n, gathered, from); break;
    case CollectiveKind::all_to_all: c.all_to_all(data, send, received, recv); break;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  size_t wrong = 0;
  if (op.kind == CollectiveKind::all_reduce)
    for (size_t i = 0; i < count; ++i) wrong += data[i] != summed(n, i);
  if (op.kind == CollectiveKind::reduce_scatter)
    for (size_t i = r * k; i < (r + 1) * k; ++i) wrong += data[i] != summed(n, i);
  if (op.kind == CollectiveKind::all_gather)
    for (size_t i = 0; i < count; ++i) wrong += gathered[i] != value(static_cast<int>(i / k), i % k);
  if (op.kind == CollectiveKind::broadcast)
    for (size_t i = 0; i < count; ++i) wrong += data[i] != value(n - 1, i);
  if (op.kind == CollectiveKind::send_recv)
    for (size_t i = 0; i < count; ++i) wrong += gathered[i] != value(from, i);
  if (op.kind == CollectiveKind::all_to_all) {
    size_t at = 0;
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < static_cast<size_t>(recv[static_cast<size_t>(q)]); ++i)
        wrong += received[at++] != a2a_value(q, r, i);
  }
  EXPECT_EQ(wrong, 0u) << op.name << " on rank " << r << " of " << n;
  return seconds;
}

// The slowest rank's seconds for each of `ops` run `times` times in turn in one fresh
// group, the fastest time over the repeats after the first (a stall repeats; a
// scheduling hiccup on a loaded core does not).
std::vector<double> best_times(const std::string& backend, int ranks, const std::vector<Op>& ops, int times) {
  std::vector<std::vector<double>> seconds(ops.size(), std::vector<double>(static_cast<size_t>(times), 0.0));
  std::mutex mutex;
  testing::run_ranks(backend, ranks, [&](Collectives& c) {
    for (int t = 0; t < times; ++t)
      for (size_t o = 0; o < ops.size(); ++o) {
        const double s = run_checked(c, ops[o]);
        std::lock_guard lock(mutex);
        seconds[o][static_cast<size_t>(t)] = std::max(seconds[o][static_cast<size_t>(t)], s);
      }
  });
  std::vector<double> best;
  for (const auto& s : seconds) best.push_back(*std::min_element(s.begin() + 1, s.end()));
  return best;
}

class MixedSizes : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Empty: no operation of `step` took more than 25 times its lone time plus 50 ms and the
// lone time of the operation before it (a rank that finished that one early waits in
// this one for the others: with more ranks than cores the slowest rank's time carries
// the skew the previous operation left); else the ones that did, with the table. The
// stalls this guards against took 250 to 500 times their lone time; a loaded machine's
// noise stays well inside 25.
std::string stalls(const std::string& backend, int ranks, const std::vector<Op>& step) {
  std::vector<double> lone;
  for (const Op& op : step) lone.push_back(best_times(backend, ranks, {op}, 4).front());
  const std::vector<double> mixed = best_times(backend, ranks, step, 4);
  std::ostringstream table;
  std::string stalled;
  for (size_t o = 0; o < step.size(); ++o) {
    table << "  " << step[o].name << ": alone " << lone[o] * 1e3 << " ms, in a step " << mixed[o] * 1e3 << " ms\n";
    const double before = lone[(o + step.size() - 1) % step.size()];
    if (mixed[o] > 25.0 * lone[o] + 0.05 + before) stalled += (stalled.empty() ? "" : ", ") + step[o].name;
  }
  return stalled.empty() ? "" : stalled + "\n" + table.str();
}

TEST_P(MixedSizes, NoOperationStallsBehindAnother) {
  const auto& [backend, ranks] = GetParam();
  EXPECT_EQ(stalls(backend, ranks, kStep), "") << "stall in a step (" << backend << ", " << ranks << " ranks)";
}

class MixedSizesAllToAll : public MixedSizes {};

TEST_P(MixedSizesAllToAll, NoAllToAllStallsBetweenAllReduces) {
  const auto& [backend, ranks] = GetParam();
  EXPECT_EQ(stalls(backend, ranks, kExpertStep), "") << "stall in an expert step (" << backend << ", " << ranks
                                                      << " ranks)";
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, MixedSizes,
                         ::testing::Combine(::testing::Values("gloo", "shm", "hierarchical"), ::testing::Values(2, 3, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + std::to_string(std::get<1>(info.param)) + "Ranks";
                         });

// hierarchical has no all-to-all: expert_parallel runs on gloo and shm.
INSTANTIATE_TEST_SUITE_P(CpuBackends, MixedSizesAllToAll,
                         ::testing::Combine(::testing::Values("gloo", "shm"), ::testing::Values(2, 3, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + std::to_string(std::get<1>(info.param)) + "Ranks";
                         });

}  // namespace
}  // namespace quartet::transport

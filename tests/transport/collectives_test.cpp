// The CPU collectives, Gloo's and shared memory's, with ranks as threads of one process
// over an in-memory store (the Gloo test style): every test runs on both backends.
// Values are small integers, so float sums are exact.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <gloo/rendezvous/file_store.h>
#include <sys/wait.h>
#include <unistd.h>

#include "transport/collectives.h"
#include "transport/gloo_collectives.h"
#include "transport/shm_collectives.h"
#include "transport/store.h"
#include "tests/transport/ranks_as_threads.h"

namespace quartet::transport {
namespace {

using namespace std::chrono_literals;

using testing::connect;
using testing::run_ranks;

class CpuCollectives : public ::testing::TestWithParam<std::string> {
 protected:
  const std::string& backend() const { return GetParam(); }
};

// Rank r's value at index i: (r + 1) * (i % 7 + 1); the sum over N ranks is
// N(N+1)/2 * (i % 7 + 1), exact in float for these sizes.
float value(int rank, size_t i) { return static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1)); }
float summed(int ranks, size_t i) { return static_cast<float>(ranks * (ranks + 1) / 2 * static_cast<int>(i % 7 + 1)); }

// Sizes: one float, not a multiple of the ranks, and several 1 MiB segments per rank.
const std::vector<size_t> kSizes = {1, 1001, (size_t{3} << 20) / 4 * 3 + 5};

void expect_all_reduce_exact(const std::string& backend, int ranks) {
  run_ranks(backend, ranks, [&](Collectives& c) {
    for (size_t n : kSizes) {
      std::vector<float> data(n);
      for (size_t i = 0; i < n; ++i) data[i] = value(c.rank(), i);
      c.all_reduce(data);
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) wrong += data[i] != summed(ranks, i);
      EXPECT_EQ(wrong, 0u) << "rank " << c.rank() << " of " << ranks << ", " << n << " floats";
    }
  });
}

TEST_P(CpuCollectives, AllReduceTwoRanksGivesExactSums) { expect_all_reduce_exact(backend(), 2); }
TEST_P(CpuCollectives, AllReduceFourRanksGivesExactSums) { expect_all_reduce_exact(backend(), 4); }
TEST_P(CpuCollectives, AllReduceThreeRanksGivesExactSums) { expect_all_reduce_exact(backend(), 3); }

TEST_P(CpuCollectives, AllReduceAverageDividesBySize) {
  run_ranks(backend(), 4, [](Collectives& c) {
    std::vector<float> data(100, static_cast<float>(c.rank() * 2));  // 0, 2, 4, 6: mean 3
    c.all_reduce(data, ReduceOp::average);
    for (float v : data) EXPECT_EQ(v, 3.0f);
  });
}

TEST_P(CpuCollectives, SingleRankAllReduceKeepsData) {
  run_ranks(backend(), 1, [](Collectives& c) {
    std::vector<float> data{1, 2, 3};
    c.all_reduce(data);
    c.all_reduce(data, ReduceOp::average);
    EXPECT_EQ(data, (std::vector<float>{1, 2, 3}));
    c.barrier();
  });
}

void expect_reduce_scatter(const std::string& backend, int ranks, size_t k, size_t piece_bytes = 0) {
  run_ranks(
      backend, ranks,
      [&](Collectives& c) {
        std::vector<float> data(k * ranks);
        for (size_t i = 0; i < data.size(); ++i) data[i] = value(c.rank(), i);
        c.reduce_scatter(data);
        size_t wrong = 0;
        for (size_t i = 0; i < k; ++i) {
          const size_t g = c.rank() * k + i;
          wrong += data[g] != summed(ranks, g);
        }
        EXPECT_EQ(wrong, 0u) << "rank " << c.rank() << " of " << ranks << ", chunk " << k;
      },
      piece_bytes);
}

TEST_P(CpuCollectives, ReduceScatterGivesEachRankItsChunkSum) {
  for (int ranks : {2, 3, 4}) {
    for (size_t k : {size_t{1}, size_t{5}, size_t{4097}}) expect_reduce_scatter(backend(), ranks, k);
  }
}

TEST_P(CpuCollectives, ReduceScatterWithManySegmentsPerChunk) {
  // 1024 floats per Gloo segment or shm slot: about 100 pieces per chunk
  expect_reduce_scatter(backend(), 3, 100003, 4096);
}

TEST_P(CpuCollectives, ReduceScatterAverage) {
  run_ranks(backend(), 2, [](Collectives& c) {
    std::vector<float> data(8, c.rank() == 0 ? 1.0f : 3.0f);
    c.reduce_scatter(data, ReduceOp::average);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(data[c.rank() * 4 + i], 2.0f);
  });
}

TEST_P(CpuCollectives, ReduceScatterRefusesSizeNotAMultipleOfRanks) {
  run_ranks(backend(), 2, [](Collectives& c) {
    std::vector<float> data(5);
    EXPECT_THROW(c.reduce_scatter(data), std::invalid_argument);
  });
}

TEST_P(CpuCollectives, AllGatherCollectsEveryRanksInput) {
  run_ranks(backend(), 4, [](Collectives& c) {
    const size_t k = 1000;
    std::vector<float> input(k);
    for (size_t i = 0; i < k; ++i) input[i] = static_cast<float>(c.rank() * 10000 + i);
    std::vector<float> output(4 * k, -1.0f);
    c.all_gather(input, output);
    for (int r = 0; r < 4; ++r)
      for (size_t i = 0; i < k; ++i) ASSERT_EQ(output[r * k + i], static_cast<float>(r * 10000 + i));
  });
}

TEST_P(CpuCollectives, AllGatherInPlace) {
  run_ranks(backend(), 3, [](Collectives& c) {
    const size_t k = 7;
    std::vector<float> buffer(3 * k, -1.0f);
    for (size_t i = 0; i < k; ++i) buffer[c.rank() * k + i] = static_cast<float>(c.rank() + 1);
    c.all_gather(std::span<const float>(buffer).subspan(c.rank() * k, k), buffer);
    for (int r = 0; r < 3; ++r)
      for (size_t i = 0; i < k; ++i) ASSERT_EQ(buffer[r * k + i], static_cast<float>(r + 1));
  });
}

TEST_P(CpuCollectives, AllGatherRefusesWrongOutputSize) {
  run_ranks(backend(), 2, [](Collectives& c) {
    std::vector<float> in(3), out(5);
    EXPECT_THROW(c.all_gather(in, out), std::invalid_argument);
  });
}

TEST_P(CpuCollectives, BroadcastCopiesRootToEveryRank) {
  for (int root : {0, 2}) {
    run_ranks(backend(), 3, [&](Collectives& c) {
      std::vector<float> data(70000, static_cast<float>(c.rank()));
      c.broadcast(data, root);
      for (float v : data) ASSERT_EQ(v, static_cast<float>(root));
    });
  }
}

TEST_P(CpuCollectives, BroadcastRefusesRootOutsideGroup) {
  run_ranks(backend(), 2, [](Collectives& c) {
    std::vector<float> data(3);
    EXPECT_THROW(c.broadcast(data, 2), std::invalid_argument);
  });
}

TEST_P(CpuCollectives, BarrierReturnsOnlyOnceEveryRankEntered) {
  std::atomic<int> entered{0};
  run_ranks(backend(), 4, [&](Collectives& c) {
    // The last rank is late; nobody may leave before it arrives.
    if (c.rank() == 3) std::this_thread::sleep_for(200ms);
    entered.fetch_add(1);
    c.barrier();
    EXPECT_EQ(entered.load(), 4) << "rank " << c.rank() << " left the barrier early";
  });
}

TEST_P(CpuCollectives, AsyncAllReduceCompletesWhileCallerComputes) {
  run_ranks(backend(), 2, [](Collectives& c) {
    const size_t n = size_t{4} << 20;  // 16 MiB
    std::vector<float> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = value(c.rank(), i);
    Work work = c.all_reduce_async(data);
    // Other work on this thread, never waiting: the operation must finish on its own.
    volatile double sink = 0.0;
    int64_t rounds = 0;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!work.completed() && std::chrono::steady_clock::now() < deadline) {
      for (int i = 0; i < 10000; ++i) sink = sink + std::sqrt(static_cast<double>(i));
      ++rounds;
    }
    ASSERT_TRUE(work.completed()) << "the async all-reduce did not finish in the background";
    EXPECT_GT(rounds, 0);
    work.wait();
    EXPECT_GT(work.seconds(), 0.0);
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += data[i] != summed(2, i);
    EXPECT_EQ(wrong, 0u);
  });
}

TEST_P(CpuCollectives, AsyncOperationsRunInIssueOrder) {
  run_ranks(backend(), 3, [](Collectives& c) {
    // b: broadcast from rank 2 then all-reduce gives 3+3+3 = 9; the other order gives
    // 6. The blocking all-reduce of a waits for the queue: 3 * 6 = 18.
    std::vector<float> a(1000, static_cast<float>(c.rank() + 1));
    std::vector<float> b(1000, static_cast<float>(c.rank() + 1));
    std::vector<Work> works;
    works.push_back(c.all_reduce_async(a));    // a = 6
    works.push_back(c.broadcast_async(a, 1));  // a = 6
    works.push_back(c.broadcast_async(b, 2));  // b = 3
    works.push_back(c.all_reduce_async(b));    // b = 9
    c.all_reduce(a);                           // after the queue: a = 18
    for (auto& w : works) w.wait();
    for (float v : a) ASSERT_EQ(v, 18.0f);
    for (float v : b) ASSERT_EQ(v, 9.0f);
  });
}

TEST_P(CpuCollectives, ManyAsyncBucketsAllComplete) {
  run_ranks(backend(), 2, [](Collectives& c) {
    std::vector<std::vector<float>> buckets(32, std::vector<float>(2500, static_cast<float>(c.rank() + 1)));
    std::vector<Work> works;
    for (auto& b : buckets) works.push_back(c.all_reduce_async(b, ReduceOp::average));
    for (auto& w : works) w.wait();
    for (auto& b : buckets)
      for (float v : b) ASSERT_EQ(v, 1.5f);
  });
}

TEST_P(CpuCollectives, StatsCountAlgorithmicBytesPerRank) {
  run_ranks(backend(), 4, [](Collectives& c) {
    std::vector<float> data(1024);  // S = 4096 bytes
    std::vector<float> shard(256);
    c.all_reduce(data);
    c.all_reduce_async(data).wait();
    c.reduce_scatter(data);
    c.all_gather(shard, data);
    c.broadcast(data, 0);
    c.barrier();
    const CollectiveStats s = c.stats();
    EXPECT_EQ(s[CollectiveKind::all_reduce].ops, 2);
    EXPECT_EQ(s[CollectiveKind::all_reduce].bytes, 2 * 6144);  // 2 (N-1)/N S
    EXPECT_EQ(s[CollectiveKind::reduce_scatter].bytes, 3072);  // (N-1)/N S
    EXPECT_EQ(s[CollectiveKind::all_gather].bytes, 3072);      // (N-1)/N S, S gathered
    EXPECT_EQ(s[CollectiveKind::broadcast].bytes, 4096);       // S
    EXPECT_EQ(s[CollectiveKind::barrier].ops, 1);
    EXPECT_EQ(s[CollectiveKind::barrier].bytes, 0);
    EXPECT_EQ(s.total().ops, 6);
    EXPECT_EQ(s.total().bytes, 2 * 6144 + 3072 + 3072 + 4096);
    EXPECT_GT(s[CollectiveKind::all_reduce].seconds, 0.0);
    c.reset_stats();
    EXPECT_EQ(c.stats().total().ops, 0);
  });
}

TEST(CollectiveFormulas, AlgorithmicBytesFollowRingFormulas) {
  const int64_t s = 64 << 20;
  EXPECT_EQ(algorithmic_bytes(CollectiveKind::all_reduce, s, 2), s);
  EXPECT_EQ(algorithmic_bytes(CollectiveKind::all_reduce, s, 4), s * 3 / 2);
  EXPECT_EQ(algorithmic_bytes(CollectiveKind::reduce_scatter, s, 4), s * 3 / 4);
  EXPECT_EQ(algorithmic_bytes(CollectiveKind::all_gather, s, 8), s * 7 / 8);
  EXPECT_EQ(algorithmic_bytes(CollectiveKind::broadcast, s, 8), s);
  EXPECT_EQ(algorithmic_bytes(CollectiveKind::barrier, s, 8), 0);
  EXPECT_EQ(algorithmic_bytes(CollectiveKind::all_reduce, s, 1), 0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveKind::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveKind::all_gather, 4), 0.75);
}

TEST_P(CpuCollectives, OperationFailsWithRankWhenAPeerIsGone) {
  MemoryStore store;
  std::unique_ptr<Collectives> c0, c1;
  std::thread t([&] { c1 = connect(backend(), store, 1, 2, 0, 10s); });
  c0 = connect(backend(), store, 0, 2, 0, 10s);
  t.join();
  c1.reset();  // rank 1 is gone
  std::vector<float> data(1000, 1.0f);
  const auto started = std::chrono::steady_clock::now();
  try {
    c0->all_reduce(data);
    FAIL() << "all_reduce succeeded without its peer";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 of 2"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s) << "noticed only at the timeout";
}

// Sums of arbitrary floats depend on the order of the additions; every rank must still
// hold the same bits (the ranks step their optimizers on them). Sizes below and above
// 1 MiB: Gloo's all-reduce runs a different algorithm for each.
void expect_same_bits(const std::string& backend, int ranks, size_t n) {
  std::vector<std::vector<float>> results(static_cast<size_t>(ranks));
  run_ranks(
      backend, ranks,
      [&](Collectives& c) {
        std::mt19937 gen(static_cast<unsigned>(c.rank() + 1));
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> data(n);
        for (float& v : data) v = normal(gen) * 1000.0f;
        c.all_reduce(data, ReduceOp::average);
        results[static_cast<size_t>(c.rank())] = std::move(data);
      },
      size_t{1} << 18);  // several pieces
  for (size_t r = 1; r < results.size(); ++r)
    EXPECT_EQ(std::memcmp(results[0].data(), results[r].data(), n * sizeof(float)), 0)
        << "rank " << r << " of " << ranks << ", " << n << " floats";
}

TEST_P(CpuCollectives, EveryRankHoldsTheSameBits) {
  for (int ranks : {2, 3}) {
    expect_same_bits(backend(), ranks, 300001);
    expect_same_bits(backend(), ranks, 30001);
  }
}

// A rank may leave (its collectives destroyed) as soon as its last all-reduce returns,
// while a peer is still taking in that all-reduce's last message; the peer must still
// get its result, not "connection closed". Many times, since it is a race.
TEST_P(CpuCollectives, RankLeavingRightAfterAnAllReduceLeavesItsPeersTheirResult) {
  for (int ranks : {2, 3}) {
    for (int trial = 0; trial < 40; ++trial) {
      run_ranks(backend(), ranks, [&](Collectives& c) {
        std::vector<float> data(1000);
        for (size_t i = 0; i < data.size(); ++i) data[i] = value(c.rank(), i);
        c.all_reduce(data);
        for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], summed(ranks, i)) << "trial " << trial;
      });
    }
  }
}

// Small all-reduces run on algorithms made once per size and kept (at most 16 sizes,
// oldest dropped first): sizes seen again, more sizes than are kept, sizes dropped and
// made again, one size on buffers at different addresses, and sizes either side of
// 1 MiB in between, all sum exactly.
TEST_P(CpuCollectives, AllReduceOfManySizesInTurnGivesExactSums) {
  std::vector<size_t> sizes;
  for (size_t k = 1; k <= 20; ++k) sizes.push_back(k * 997);
  sizes.push_back((size_t{1} << 18) + 1);  // just over 1 MiB
  sizes.push_back(size_t{1} << 18);        // exactly 1 MiB
  for (int ranks : {2, 3}) {
    run_ranks(backend(), ranks, [&](Collectives& c) {
      for (int round = 0; round < 3; ++round) {
        for (size_t j = 0; j < sizes.size(); ++j) {
          // Round 1 walks the sizes backwards; a fresh buffer each time.
          const size_t n = sizes[round == 1 ? sizes.size() - 1 - j : j];
          std::vector<float> data(n);
          for (size_t i = 0; i < n; ++i) data[i] = value(c.rank(), i);
          c.all_reduce(data);
          size_t wrong = 0;
          for (size_t i = 0; i < n; ++i) wrong += data[i] != summed(ranks, i);
          ASSERT_EQ(wrong, 0u) << "rank " << c.rank() << " of " << ranks << ", " << n << " floats, round " << round;
        }
      }
    });
  }
}

TEST_P(CpuCollectives, EveryOperationWorksInManyPieces) {
  run_ranks(
      backend(), 3,
      [](Collectives& c) {
        const size_t k = 2500;  // 10,000 bytes a rank: 3 pieces of 4,096 bytes
        std::vector<float> data(3 * k);
        for (size_t i = 0; i < data.size(); ++i) data[i] = value(c.rank(), i);
        c.all_reduce(data);
        for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], summed(3, i)) << i;
        std::vector<float> input(k, static_cast<float>(c.rank())), gathered(3 * k);
        c.all_gather(input, gathered);
        for (size_t i = 0; i < gathered.size(); ++i) ASSERT_EQ(gathered[i], static_cast<float>(i / k)) << i;
        std::vector<float> b(k, static_cast<float>(c.rank() + 1));
        c.broadcast(b, 1);
        for (float v : b) ASSERT_EQ(v, 2.0f);
      },
      4096);
}

// Wire::f16. Rank r's inputs: normal values of spread 10 (well inside half's range),
// different per rank. The reference is the float32 (here double) sum of the inputs
// rounded to half. Tolerance: the result passes at most N roundings to half (the ring's
// N-2 forwarded partial sums and the gathered result; shm only rounds inputs), each off
// by at most 2^-11 of a value bounded by sum_r |x_r|, plus half's subnormal step.
std::vector<float> half_wire_input(int rank, size_t n) {
  std::mt19937 gen(static_cast<unsigned>(rank * 7919 + static_cast<int>(n % 1000)));
  std::normal_distribution<float> normal(0.0f, 10.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(gen);
  return x;
}

// Checks data[from, from + count) against the sum (mean) of the ranks' rounded inputs.
void expect_half_wire_sum(const std::vector<float>& data, size_t from, size_t count, int ranks, size_t n,
                          ReduceOp op) {
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < ranks; ++r) {
    inputs.push_back(half_wire_input(r, n));
    round_to_half(inputs.back());
  }
  const double scale = op == ReduceOp::average ? 1.0 / ranks : 1.0;
  size_t wrong = 0;
  for (size_t i = from; i < from + count; ++i) {
    double sum = 0.0, magnitude = 0.0;
    for (const auto& x : inputs) sum += x[i], magnitude += std::fabs(x[i]);
    const double tolerance = ranks * (std::ldexp(magnitude, -11) + std::ldexp(1.0, -24));
    wrong += !(std::fabs(data[i] - sum * scale) <= tolerance * scale);
  }
  EXPECT_EQ(wrong, 0u) << ranks << " ranks, " << n << " values";
}

TEST_P(CpuCollectives, HalfWireAllReduceEqualsFloatSumOfRoundedInputs) {
  for (int ranks : {2, 3}) {
    std::vector<std::vector<float>> results(ranks);
    for (size_t n : {size_t{1}, size_t{7}, size_t{1000003}}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
        run_ranks(backend(), ranks, [&](Collectives& c) {
          ASSERT_TRUE(c.half_wire());
          std::vector<float> data = half_wire_input(c.rank(), n);
          c.all_reduce(data, op, Wire::f16);
          expect_half_wire_sum(data, 0, n, ranks, n, op);
          results[c.rank()] = std::move(data);
        });
        for (int r = 1; r < ranks; ++r) EXPECT_EQ(results[r], results[0]) << "rank " << r << ", " << n << " values";
      }
    }
  }
}

TEST_P(CpuCollectives, HalfWireReduceScatterEqualsFloatSumOfRoundedInputs) {
  for (int ranks : {2, 3}) {
    for (size_t k : {size_t{1}, size_t{7}, size_t{100003}}) {
      run_ranks(
          backend(), ranks,
          [&](Collectives& c) {
            const size_t n = k * static_cast<size_t>(ranks);
            std::vector<float> data = half_wire_input(c.rank(), n);
            c.reduce_scatter(data, ReduceOp::average, Wire::f16);
            expect_half_wire_sum(data, static_cast<size_t>(c.rank()) * k, k, ranks, n, ReduceOp::average);
          },
          4096);  // many segments (slots) per chunk
    }
  }
}

TEST_P(CpuCollectives, HalfWireSumsOfSmallIntegersAreExact) {
  run_ranks(backend(), 3, [](Collectives& c) {
    const size_t n = 100001;
    std::vector<float> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = value(c.rank(), i);
    c.all_reduce(data, ReduceOp::sum, Wire::f16);
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += data[i] != summed(3, i);
    EXPECT_EQ(wrong, 0u);
  });
}

TEST_P(CpuCollectives, HalfWireSingleRankKeepsRoundedData) {
  run_ranks(backend(), 1, [](Collectives& c) {
    std::vector<float> data{1.0f, 1.0f + 1.0f / 4096, 3.0f};
    c.all_reduce(data, ReduceOp::sum, Wire::f16);
    EXPECT_EQ(data, (std::vector<float>{1.0f, 1.0f, 3.0f}));
  });
}

// The counted bytes follow the element that travels: halves are half the floats' bytes.
TEST_P(CpuCollectives, HalfWireCountsHalfTheBytes) {
  run_ranks(backend(), 2, [](Collectives& c) {
    std::vector<float> data(1000, 1.0f);
    c.all_reduce(data);
    c.reduce_scatter(data);
    const CollectiveStats f32 = c.stats();
    c.reset_stats();
    c.all_reduce(data, ReduceOp::sum, Wire::f16);
    c.reduce_scatter_async(data, ReduceOp::sum, Wire::f16).wait();
    const CollectiveStats f16 = c.stats();
    EXPECT_EQ(f32[CollectiveKind::all_reduce].bytes, 4000);  // 2 (N-1)/N S, S = 4000
    EXPECT_EQ(f16[CollectiveKind::all_reduce].bytes, 2000);
    EXPECT_EQ(f32[CollectiveKind::reduce_scatter].bytes, 2000);
    EXPECT_EQ(f16[CollectiveKind::reduce_scatter].bytes, 1000);
  });
}

// All-to-all with counts that differ per pair: rank q sends (q + 2p) % 5 * k floats to rank
// p (some pairs send nothing), each float naming its sender, receiver and place.
int64_t a2a_count(int from, int to, int64_t k) { return (from + 2 * to) % 5 * k; }
float a2a_value(int from, int to, int64_t i) { return static_cast<float>(from * 1000000 + to * 100000 + i); }

void expect_all_to_all(const std::string& backend, int ranks, int64_t k, size_t piece_bytes = 0, bool async = false) {
  run_ranks(
      backend, ranks,
      [&](Collectives& c) {
        const int me = c.rank();
        std::vector<int64_t> send, recv;
        std::vector<float> input;
        for (int p = 0; p < ranks; ++p) {
          send.push_back(a2a_count(me, p, k));
          recv.push_back(a2a_count(p, me, k));
          for (int64_t i = 0; i < send.back(); ++i) input.push_back(a2a_value(me, p, i));
        }
        std::vector<float> output(static_cast<size_t>(std::accumulate(recv.begin(), recv.end(), int64_t{0})), -1.0f);
        if (async)
          c.all_to_all_async(input, send, output, recv).wait();
        else
          c.all_to_all(input, send, output, recv);
        size_t at = 0, wrong = 0;
        for (int q = 0; q < ranks; ++q)
          for (int64_t i = 0; i < recv[static_cast<size_t>(q)]; ++i) wrong += output[at++] != a2a_value(q, me, i);
        EXPECT_EQ(wrong, 0u) << "rank " << me << " of " << ranks << ", k " << k;
        const CollectiveStats s = c.stats();
        EXPECT_EQ(s[CollectiveKind::all_to_all].ops, 1);
        EXPECT_EQ(s[CollectiveKind::all_to_all].bytes, all_to_all_sent_bytes(send, me));
      },
      piece_bytes);
}

TEST_P(CpuCollectives, AllToAllDeliversEveryChunkAtTwoThreeAndFourRanks) {
  for (int ranks : {2, 3, 4})
    for (int64_t k : {int64_t{1}, int64_t{1000}}) expect_all_to_all(backend(), ranks, k);
}

TEST_P(CpuCollectives, AllToAllInManyPiecesAndAsynchronously) {
  expect_all_to_all(backend(), 3, 3001, 4096);  // 1,024 floats a Gloo segment or shm slot
  expect_all_to_all(backend(), 4, 17, 0, true);
}

TEST_P(CpuCollectives, AllToAllWithNothingToSendOrReceive) {
  run_ranks(backend(), 3, [](Collectives& c) {
    // Only rank 0 sends, 5 floats to rank 2; ranks 1 and 2 send nothing at all.
    const std::vector<int64_t> send = c.rank() == 0 ? std::vector<int64_t>{0, 0, 5} : std::vector<int64_t>{0, 0, 0};
    const std::vector<int64_t> recv = c.rank() == 2 ? std::vector<int64_t>{5, 0, 0} : std::vector<int64_t>{0, 0, 0};
    std::vector<float> input(c.rank() == 0 ? 5 : 0, 7.0f), output(c.rank() == 2 ? 5 : 0);
    c.all_to_all(input, send, output, recv);
    c.all_to_all(input, send, output, recv);
    for (float v : output) EXPECT_EQ(v, 7.0f);
  });
}

TEST_P(CpuCollectives, SingleRankAllToAllCopiesItsChunk) {
  run_ranks(backend(), 1, [](Collectives& c) {
    const std::vector<float> input{1, 2, 3};
    std::vector<float> output(3);
    const std::vector<int64_t> counts{3};
    c.all_to_all(input, counts, output, counts);
    EXPECT_EQ(output, input);
    EXPECT_EQ(c.stats()[CollectiveKind::all_to_all].bytes, 0);
  });
}

TEST_P(CpuCollectives, AllToAllRefusesCountsThatDoNotFitTheBuffers) {
  run_ranks(backend(), 2, [](Collectives& c) {
    std::vector<float> input(4), output(4);
    const std::vector<int64_t> two{2, 2}, three{1, 1, 2}, wrong{3, 2}, negative{-1, 5};
    EXPECT_THROW(c.all_to_all(input, three, output, two), std::invalid_argument);
    EXPECT_THROW(c.all_to_all(input, wrong, output, two), std::invalid_argument);
    EXPECT_THROW(c.all_to_all(input, two, output, negative), std::invalid_argument);
    c.all_to_all(input, two, output, two);  // the group still works
  });
}

TEST(CollectiveFormulas, AllToAllCountsWhatGoesToOtherRanks) {
  const std::vector<int64_t> counts{10, 20, 30, 40};
  EXPECT_EQ(all_to_all_sent_bytes(counts, 1), 4 * (10 + 30 + 40));
  EXPECT_EQ(algorithmic_bytes(CollectiveKind::all_to_all, 320, 4), 320);
  EXPECT_EQ(algorithmic_messages(CollectiveKind::all_to_all, 4), 3);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveKind::all_to_all, 4), 0.75);
}

INSTANTIATE_TEST_SUITE_P(Backends, CpuCollectives, ::testing::Values("gloo", "shm"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// shm only: what Gloo does through sockets, it must do through the segment's words.

std::string host_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

std::string rendezvous_error(const std::string& published) {
  MemoryStore store(5s);
  store.set("shm/segment", std::vector<char>(published.begin(), published.end()));
  try {
    ShmOptions o;
    o.timeout = 5s;
    make_shm_collectives(store, 1, 2, o);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(ShmCollectives, AllToAllWithCountsThePairsDisagreeOnFailsOnEveryRank) {
  std::atomic<int> refused{0};
  run_ranks("shm", 2, [&](Collectives& c) {
    // Rank 0 sends 3 floats to rank 1, which expects 2.
    const std::vector<int64_t> send = c.rank() == 0 ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{1, 1};
    const std::vector<int64_t> recv = c.rank() == 0 ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{2, 1};
    std::vector<float> input(static_cast<size_t>(send[0] + send[1])), output(static_cast<size_t>(recv[0] + recv[1]));
    try {
      c.all_to_all(input, send, output, recv);
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0 sends 3 floats to rank 1, which expects 2"), std::string::npos)
          << e.what();
      ++refused;
    }
  });
  EXPECT_EQ(refused.load(), 2);
}

TEST(ShmCollectives, RefusesARankZeroOnAnotherHost) {
  const std::string e = rendezvous_error("/quartet-none\nanother-boot-id");
  EXPECT_NE(e.find("rank 1 of 2"), std::string::npos) << e;
  EXPECT_NE(e.find("another host"), std::string::npos) << e;
  EXPECT_NE(e.find("gloo"), std::string::npos) << e;
}

TEST(ShmCollectives, RefusesASegmentItCannotOpen) {
  const std::string e = rendezvous_error("/quartet-no-such-segment\n" + host_id());
  EXPECT_NE(e.find("one host"), std::string::npos) << e;
}

TEST(ShmCollectives, LeavesNothingInDevShm) {
  // Rank 0's segment is named after its process; other test processes may make their own.
  const std::string ours = "quartet-" + std::to_string(getpid()) + "-";
  auto listing = [&] {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
      if (e.path().filename().string().rfind(ours, 0) == 0) names.insert(e.path().filename().string());
    return names;
  };
  const auto before = listing();
  run_ranks("shm", 2, [&](Collectives& c) {
    c.barrier();  // both attached: the name is gone already
    EXPECT_EQ(listing(), before);
  });
  EXPECT_EQ(listing(), before);
}

// A peer process that dies without leaving (kill -9, OOM) is noticed by its pid.
TEST(ShmCollectives, NoticesAPeerProcessThatExited) {
  const auto dir = std::filesystem::temp_directory_path() / ("quartet-shm-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  gloo::rendezvous::FileStore store(dir.string());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      auto c = connect("shm", store, 1, 2);
      c->barrier();
      _exit(0);  // c's destructor never runs: the group is not told
    } catch (...) {
      _exit(3);
    }
  }
  std::string error;
  try {
    auto c = connect("shm", store, 0, 2);
    c->barrier();
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const auto started = std::chrono::steady_clock::now();
    std::vector<float> data(100, 1.0f);
    try {
      c->all_reduce(data);
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
  } catch (...) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    std::filesystem::remove_all(dir);
    throw;
  }
  std::filesystem::remove_all(dir);
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;
  EXPECT_NE(error.find("exited"), std::string::npos) << error;
}

TEST(MemoryStore, WaitTimesOutNamingTheMissingKey) {
  MemoryStore store;
  store.set("a", {'1'});
  try {
    store.wait({"a", "b"}, 50ms);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("b"), std::string::npos);
  }
  EXPECT_EQ(store.get("a"), std::vector<char>{'1'});
}

}  // namespace
}  // namespace quartet::transport

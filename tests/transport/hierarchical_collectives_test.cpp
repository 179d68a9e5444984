// Hierarchical collectives with ranks as threads of one process over an in-memory store:
// host keys are given per rank, so 2 hosts x 2 ranks run on any machine (shared memory
// within a "host", Gloo over 127.0.0.1 between its leaders).

#include <gtest/gtest.h>

#include <cmath>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "transport/gloo_collectives.h"
#include "transport/hierarchical_collectives.h"
#include "transport/store.h"

namespace quartet::transport {
namespace {

using namespace std::chrono_literals;

HierarchicalOptions test_options() {
  HierarchicalOptions o;
  o.intra.timeout = 60s;
  o.inter.timeout = 60s;
  return o;
}

// Runs fn on keys.size() threads, rank r on host keys[r]; flat: Gloo over every rank
// instead. Rethrows the first error.
void run_ranks(const std::vector<std::string>& keys, bool flat, const std::function<void(Collectives&)>& fn) {
  MemoryStore store;
  std::vector<std::thread> threads;
  std::mutex error_mutex;
  std::exception_ptr error;
  const int n = static_cast<int>(keys.size());
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto c = flat ? make_gloo_collectives(store, r, n, test_options().inter)
                      : make_hierarchical_collectives(store, r, n, keys[static_cast<size_t>(r)], test_options());
        fn(*c);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

const std::vector<std::string> kTwoByTwo = {"host-a", "host-b", "host-a", "host-b"};  // not contiguous

std::vector<float> random_input(int rank, size_t n) {
  std::mt19937 gen(static_cast<unsigned>(17 + rank));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// Every rank's result of one all-reduce of its random_input.
std::vector<std::vector<float>> all_reduced(const std::vector<std::string>& keys, bool flat, ReduceOp op,
                                            Wire wire = Wire::f32, size_t n = 10001) {
  std::vector<std::vector<float>> out(keys.size());
  run_ranks(keys, flat, [&](Collectives& c) {
    std::vector<float> v = random_input(c.rank(), n);
    c.all_reduce(v, op, wire);
    out[static_cast<size_t>(c.rank())] = v;
  });
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

TEST(HostLayout, GroupsRanksByKeyInOrderOfTheirLowestRank) {
  const HostLayout l = host_layout({"b", "a", "b", "c", "a"});
  EXPECT_EQ(l.hosts(), 3);
  EXPECT_EQ(l.host_of, (std::vector<int>{0, 1, 0, 2, 1}));
  EXPECT_EQ(l.local_of, (std::vector<int>{0, 0, 1, 0, 1}));
  EXPECT_EQ(l.host_size, (std::vector<int>{2, 2, 1}));
}

TEST(HostLayout, HostKeyNamesTheNetworkNamespace) {
  EXPECT_NE(host_key().find("net:["), std::string::npos) << host_key();
  EXPECT_EQ(host_key(), host_key());
}

// Small integers: every order of adding gives the same floats, so hierarchical and flat
// agree bit for bit, and every rank holds the same bits.
TEST(HierarchicalCollectives, AllReduceOfIntegersEqualsFlatBitForBit) {
  for (const auto& keys : {kTwoByTwo, std::vector<std::string>{"a", "a", "b", "b"}}) {
    std::vector<std::vector<float>> got(4);
    run_ranks(keys, false, [&](Collectives& c) {
      std::vector<float> v(3001);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((c.rank() + 1) * static_cast<int>(i % 7 + 1));
      c.all_reduce(v, ReduceOp::average);
      got[static_cast<size_t>(c.rank())] = v;
    });
    for (size_t i = 0; i < got[0].size(); ++i) ASSERT_EQ(got[0][i], 2.5f * static_cast<float>(i % 7 + 1)) << i;
    for (int r = 1; r < 4; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], got[0]) << "rank " << r;
  }
}

// Random floats: the sums are added in another order than the flat ring's, so they agree
// to float rounding; every rank still holds its leader's bits.
TEST(HierarchicalCollectives, AllReduceEqualsFlatWithinRounding) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
    const auto flat = all_reduced(kTwoByTwo, true, op);
    const auto hier = all_reduced(kTwoByTwo, false, op);
    for (int r = 0; r < 4; ++r) {
      EXPECT_LT(max_abs_diff(hier[static_cast<size_t>(r)], flat[0]), 4e-6) << "rank " << r;
      EXPECT_EQ(hier[static_cast<size_t>(r)], hier[0]) << "rank " << r;
    }
  }
}

// fp16 wire: the inputs and the hosts' sums are rounded to half, so the result stays
// within half precision of the flat fp32 all-reduce, the same on every rank.
TEST(HierarchicalCollectives, HalfWireStaysWithinHalfPrecision) {
  const auto exact = all_reduced(kTwoByTwo, true, ReduceOp::average);
  const auto hier = all_reduced(kTwoByTwo, false, ReduceOp::average, Wire::f16);
  EXPECT_LT(max_abs_diff(hier[0], exact[0]), 4e-3);
  EXPECT_GT(max_abs_diff(hier[0], exact[0]), 0.0);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(hier[static_cast<size_t>(r)], hier[0]);
}

// Per level: intra, the host's all-reduce 2(L-1)/L * S plus the leader's broadcast S;
// inter, the leaders' ring 2(H-1)/H * S and nothing on the others.
TEST(HierarchicalCollectives, CountsBytesPerLevelByTheFormula) {
  for (Wire wire : {Wire::f32, Wire::f16}) {
    run_ranks(kTwoByTwo, false, [&](Collectives& c) {
      const int64_t n = 1000, s = n * wire_element_bytes(wire), floats = n * 4;
      std::vector<float> v(static_cast<size_t>(n), 1.0f);
      c.all_reduce(v, ReduceOp::sum, wire);
      const std::vector<LevelTotals> levels = c.levels();
      ASSERT_EQ(levels.size(), 2u);
      EXPECT_EQ(levels[0].name, "intra");
      EXPECT_EQ(levels[0].totals.bytes, 2 * (2 - 1) * s / 2 + floats);
      const bool leader = c.rank() < 2;  // ranks 0 and 1 are the lowest of hosts a and b
      EXPECT_EQ(levels[1].name, "inter");
      EXPECT_EQ(levels[1].totals.bytes, leader ? 2 * (2 - 1) * s / 2 : 0);
      EXPECT_EQ(c.stats().total().bytes, levels[0].totals.bytes + levels[1].totals.bytes);
    });
  }
}

TEST(HierarchicalCollectives, BroadcastAllGatherAndBarrierReachEveryRank) {
  run_ranks(kTwoByTwo, false, [](Collectives& c) {
    for (int root = 0; root < 4; ++root) {
      std::vector<float> v(77, static_cast<float>(c.rank() * 10 + 1));
      c.broadcast(v, root);
      for (float x : v) ASSERT_EQ(x, static_cast<float>(root * 10 + 1)) << "root " << root;
    }
    std::vector<float> mine(5, static_cast<float>(c.rank() + 1)), all(20, -1.0f);
    c.all_gather(mine, all);
    for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<float>(i / 5 + 1));
    c.barrier();
  });
}

TEST(HierarchicalCollectives, OneHostAndOneRankPerHostWork) {
  for (const auto& keys : {std::vector<std::string>{"a", "a", "a"}, std::vector<std::string>{"a", "b", "c"}}) {
    run_ranks(keys, false, [](Collectives& c) {
      std::vector<float> v(10, static_cast<float>(c.rank()));
      c.all_reduce(v);
      for (float x : v) EXPECT_EQ(x, 3.0f);
    });
  }
}

}  // namespace
}  // namespace quartet::transport

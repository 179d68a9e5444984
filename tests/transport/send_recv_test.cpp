// send_recv on every CPU backend, ranks as threads of one process over an in-memory store:
// the ring shift that ring attention makes of it (each rank's block to the next), other
// permutations, asynchronous shifts beside all-reduces in issue order, the bytes counted,
// and the refusals.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/transport/ranks_as_threads.h"
#include "transport/collectives.h"

namespace quartet::transport {
namespace {

using testing::run_ranks;

class SendRecv : public ::testing::TestWithParam<std::string> {
 protected:
  const std::string& backend() const { return GetParam(); }
};

float value(int rank, size_t i) { return static_cast<float>(rank * 100003 + static_cast<int>(i % 100003)); }

std::vector<float> block_of(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(rank, i);
  return v;
}

// Sizes: one float, an odd count, and several shm slots / Gloo segments of 4 KiB.
TEST_P(SendRecv, RingShiftHandsEachRanksBlockToTheNext) {
  for (int ranks : {2, 3, 4})
    run_ranks(
        backend(), ranks,
        [&](Collectives& c) {
          const int n = c.size(), r = c.rank(), from = (r + n - 1) % n;
          for (size_t count : {size_t{1}, size_t{1001}, size_t{10007}}) {
            const std::vector<float> mine = block_of(r, count);
            std::vector<float> got(count, -1.0f);
            c.send_recv(mine, (r + 1) % n, got, from);
            EXPECT_EQ(got, block_of(from, count)) << "rank " << r << " of " << n << ", " << count << " floats";
          }
        },
        4096);
}

// N - 1 shifts in turn, each passing on what the last one brought: every rank sees every
// other rank's block once, in ring order (what ring attention's forward does).
TEST_P(SendRecv, NMinusOneShiftsShowEveryRankEveryBlock) {
  run_ranks(backend(), 4, [](Collectives& c) {
    const int n = c.size(), r = c.rank();
    std::vector<float> held = block_of(r, 64), next(64);
    for (int s = 1; s < n; ++s) {
      c.send_recv(held, (r + 1) % n, next, (r + n - 1) % n);
      held.swap(next);
      EXPECT_EQ(held, block_of((r - s + n) % n, 64)) << "rank " << r << ", shift " << s;
    }
  });
}

TEST_P(SendRecv, PairsSwapWithAnyPermutation) {
  run_ranks(backend(), 4, [](Collectives& c) {
    const int partner = c.size() - 1 - c.rank();  // 0 <-> 3, 1 <-> 2
    std::vector<float> got(300);
    c.send_recv(block_of(c.rank(), 300), partner, got, partner);
    EXPECT_EQ(got, block_of(partner, 300));
  });
}

// Asynchronous shifts and all-reduces keep their issue order on every rank, as a
// backward pass issues ring shifts between gradient buckets.
TEST_P(SendRecv, AsyncShiftsRunInIssueOrderBesideAllReduces) {
  run_ranks(backend(), 3, [](Collectives& c) {
    const int n = c.size(), r = c.rank();
    std::vector<float> a(700, static_cast<float>(r + 1)), b = block_of(r, 700), got(700), bucket(900, 1.0f);
    std::vector<Work> works;
    works.push_back(c.all_reduce_async(a));                                 // a = 6
    works.push_back(c.send_recv_async(b, (r + 1) % n, got, (r + n - 1) % n));
    works.push_back(c.all_reduce_async(bucket, ReduceOp::average));         // 1
    works.push_back(c.send_recv_async(a, (r + 2) % n, b, (r + 1) % n));    // b = 6s
    for (Work& w : works) w.wait();
    for (float v : a) ASSERT_EQ(v, 6.0f);
    for (float v : b) ASSERT_EQ(v, 6.0f);
    for (float v : bucket) ASSERT_EQ(v, 1.0f);
    EXPECT_EQ(got, block_of((r + n - 1) % n, 700));
  });
}

TEST_P(SendRecv, StatsCountTheBytesSentAndOneMessage) {
  run_ranks(backend(), 4, [](Collectives& c) {
    std::vector<float> in(1024), out(1024);  // S = 4096 bytes
    c.send_recv(in, (c.rank() + 1) % 4, out, (c.rank() + 3) % 4);
    c.send_recv_async(in, (c.rank() + 1) % 4, out, (c.rank() + 3) % 4).wait();
    const CollectiveStats s = c.stats();
    EXPECT_EQ(s[CollectiveKind::send_recv].ops, 2);
    EXPECT_EQ(s.messages(4), 2);
    // Hierarchical is made of an all-reduce of every rank's block and counts that.
    if (std::string(c.backend()) != "hierarchical") {
      EXPECT_EQ(s[CollectiveKind::send_recv].bytes, 2 * 4096);
    }
  });
  EXPECT_EQ(algorithmic_bytes(CollectiveKind::send_recv, 4096, 4), 4096);
  EXPECT_EQ(algorithmic_bytes(CollectiveKind::send_recv, 4096, 1), 0);
  EXPECT_EQ(algorithmic_messages(CollectiveKind::send_recv, 4), 1);
}

TEST_P(SendRecv, OneRankExchangesWithItself) {
  run_ranks(backend(), 1, [](Collectives& c) {
    std::vector<float> got(5);
    c.send_recv(block_of(0, 5), 0, got, 0);
    EXPECT_EQ(got, block_of(0, 5));
  });
}

TEST_P(SendRecv, RefusesOtherSizesPeersOutsideAndHalfExchangesWithItself) {
  run_ranks(backend(), 2, [](Collectives& c) {
    std::vector<float> in(3), out(4), ok(3);
    const int other = 1 - c.rank();
    EXPECT_THROW(c.send_recv(in, other, out, other), std::invalid_argument);
    EXPECT_THROW(c.send_recv(in, 2, ok, other), std::invalid_argument);
    EXPECT_THROW(c.send_recv(in, c.rank(), ok, other), std::invalid_argument);
    EXPECT_THROW(c.send_recv({}, other, {}, other), std::invalid_argument);
    c.send_recv(in, other, ok, other);  // the group still works
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, SendRecv, ::testing::Values("gloo", "shm", "hierarchical"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace quartet::transport

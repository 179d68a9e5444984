// Sub-groups over every CPU backend, ranks as threads of one process over one in-memory
// store: four world ranks on a 2 x 2 grid, each in a "row" group ({0, 1}, {2, 3}) and a
// "column" group ({0, 2}, {1, 3}), as a mesh's tp and dp axes are.

#include "transport/sub_group.h"

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "tests/transport/ranks_as_threads.h"
#include "transport/store.h"

namespace quartet::transport {
namespace {

struct Grid {
  int world_rank;
  std::unique_ptr<Collectives> row, column;
};

SubGroup row_of(int r) { return {"row/" + std::to_string(r / 2), {r / 2 * 2, r / 2 * 2 + 1}}; }
SubGroup column_of(int r) { return {"column/" + std::to_string(r % 2), {r % 2, r % 2 + 2}}; }

// Runs fn on four threads, each world rank r with its row and column groups over
// `backend`; rethrows the first error.
void run_grid(const std::string& backend, const std::function<void(Grid&)>& fn) {
  MemoryStore store;
  const MakeCollectives make = [&](gloo::rendezvous::Store& s, int rank, int size) {
    return testing::connect(backend, s, rank, size);
  };
  std::vector<std::thread> threads;
  std::mutex error_mutex;
  std::exception_ptr error;
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, r] {
      try {
        Grid g{r, make_sub_group(store, r, row_of(r), make), make_sub_group(store, r, column_of(r), make)};
        fn(g);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

class SubGroupTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SubGroupTest, EachRankHasItsPlaceInEachGroup) {
  run_grid(GetParam(), [](Grid& g) {
    EXPECT_EQ(g.row->size(), 2);
    EXPECT_EQ(g.column->size(), 2);
    EXPECT_EQ(g.row->rank(), g.world_rank % 2);
    EXPECT_EQ(g.column->rank(), g.world_rank / 2);
  });
}

// Each group reduces, gathers and scatters its own members' data only.
TEST_P(SubGroupTest, ReductionsAndGathersStayInsideTheGroup) {
  run_grid(GetParam(), [](Grid& g) {
    const float me = static_cast<float>(g.world_rank + 1);
    std::vector<float> row(1001, me), column(1001, me);
    g.row->all_reduce(row);
    g.column->all_reduce(column);
    const float row_sum = static_cast<float>(row_of(g.world_rank).members[0] + row_of(g.world_rank).members[1] + 2);
    const float column_sum = static_cast<float>(g.world_rank % 2 * 2 + 2 + 2);
    EXPECT_EQ(row, std::vector<float>(1001, row_sum));
    EXPECT_EQ(column, std::vector<float>(1001, column_sum));

    std::vector<float> gathered(6);
    g.column->all_gather(std::vector<float>(3, me), gathered);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(gathered[i], static_cast<float>(g.world_rank % 2 + 2 * (i / 3) + 1)) << i;

    std::vector<float> scattered(8);
    std::iota(scattered.begin(), scattered.end(), me);
    g.row->reduce_scatter(scattered);
    const int mine = g.row->rank() * 4;
    for (int i = mine; i < mine + 4; ++i) EXPECT_EQ(scattered[i], row_sum + 2.0f * static_cast<float>(i)) << i;
  });
}

// Point to point and all-to-all address the group's ranks, not the world's.
TEST_P(SubGroupTest, SendRecvAndAllToAllAddressGroupRanks) {
  run_grid(GetParam(), [](Grid& g) {
    const float me = static_cast<float>(g.world_rank);
    const int other = 1 - g.column->rank();
    std::vector<float> got(5);
    g.column->send_recv(std::vector<float>(5, me), other, got, other);
    EXPECT_EQ(got, std::vector<float>(5, static_cast<float>((g.world_rank + 2) % 4)));

    // Rank p of the row gets p + 1 values from each.
    const std::vector<int64_t> send{1, 2};
    const std::vector<int64_t> recv(2, g.row->rank() + 1);
    std::vector<float> output(static_cast<size_t>(2 * (g.row->rank() + 1)));
    g.row->all_to_all(std::vector<float>(3, me), send, output, recv);
    const int first = g.world_rank / 2 * 2;
    for (size_t i = 0; i < output.size(); ++i)
      EXPECT_EQ(output[i], static_cast<float>(first + static_cast<int>(i) / (g.row->rank() + 1))) << i;
  });
}

// Both groups' collectives in flight together, issued in opposite orders on their own
// workers, finish with each group's own sums.
TEST_P(SubGroupTest, TwoGroupsRunAtOnce) {
  run_grid(GetParam(), [](Grid& g) {
    std::vector<std::vector<float>> row(4, std::vector<float>(20000, 1.0f)), column(4, std::vector<float>(20000, 2.0f));
    std::vector<Work> work;
    for (int i = 0; i < 4; ++i) {
      work.push_back(g.row->all_reduce_async(row[static_cast<size_t>(i)]));
      work.push_back(g.column->all_reduce_async(column[static_cast<size_t>(3 - i)]));
    }
    for (Work& w : work) w.wait();
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(row[static_cast<size_t>(i)], std::vector<float>(20000, 2.0f));
      EXPECT_EQ(column[static_cast<size_t>(i)], std::vector<float>(20000, 4.0f));
    }
  });
}

// Each group counts what it moved by its own size: the row's three all-reduces and the
// column's one all-gather, never each other's.
TEST_P(SubGroupTest, CountsBytesPerGroup) {
  run_grid(GetParam(), [](Grid& g) {
    std::vector<float> v(1000, 1.0f), gathered(2000);
    for (int i = 0; i < 3; ++i) g.row->all_reduce(v);
    g.column->all_gather(std::span<const float>(v), gathered);
    const CollectiveStats row = g.row->stats(), column = g.column->stats();
    EXPECT_EQ(row[CollectiveKind::all_reduce].ops, 3);
    EXPECT_EQ(row.total().bytes, 3 * algorithmic_bytes(CollectiveKind::all_reduce, 4000, 2));
    EXPECT_EQ(row[CollectiveKind::all_gather].ops, 0);
    EXPECT_EQ(column.total().bytes, algorithmic_bytes(CollectiveKind::all_gather, 8000, 2));
    EXPECT_EQ(column[CollectiveKind::all_reduce].ops, 0);
  });
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, SubGroupTest, ::testing::Values("shm", "gloo"),
                         [](const auto& info) { return info.param; });

TEST(SubGroup, PlaceIsTheIndexAmongTheMembers) {
  const SubGroup g{"dp/1", {5, 1, 3}};
  EXPECT_EQ(place_in(g, 5), 0);
  EXPECT_EQ(place_in(g, 3), 2);
  EXPECT_THROW(place_in(g, 2), std::invalid_argument);
}

TEST(SubGroup, RefusesARankListedTwiceOrNotAMember) {
  MemoryStore store;
  const MakeCollectives never = [](gloo::rendezvous::Store&, int, int) -> std::unique_ptr<Collectives> {
    ADD_FAILURE() << "a refused group was made";
    return nullptr;
  };
  EXPECT_THROW(make_sub_group(store, 1, {"tp/0", {1, 1}}, never), std::invalid_argument);
  EXPECT_THROW(make_sub_group(store, 2, {"tp/0", {0, 1}}, never), std::invalid_argument);
  EXPECT_THROW(make_sub_group(store, 0, {"", {0}}, never), std::invalid_argument);
}

}  // namespace
}  // namespace quartet::transport

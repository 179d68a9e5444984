// NCCL collectives on one GPU (a one-rank communicator). Skips, saying why, without a GPU.

#include "transport/nccl/nccl_collectives.h"

#include <gtest/gtest.h>

#include <vector>

#include "transport/store.h"

namespace quartet::transport {
namespace {

#define SKIP_WITHOUT_GPU()                                                              \
  do {                                                                                  \
    if (const std::string why = nccl_unavailable_reason(); !why.empty()) GTEST_SKIP() << "no GPU: " << why; \
  } while (0)

TEST(NcclCollectives, ReasonIsEmptyOrSaysWhatIsMissing) {
  const std::string why = nccl_unavailable_reason();
  if (!why.empty()) {
    EXPECT_NE(why.find("cuda"), std::string::npos) << why;
  }
}

TEST(NcclCollectives, MakingACommunicatorWithoutAGpuFailsSayingWhy) {
  if (nccl_unavailable_reason().empty()) GTEST_SKIP() << "a GPU is present";
  MemoryStore store;
  try {
    make_nccl_collectives(store, 0, 1);
    FAIL() << "made an NCCL communicator without a GPU";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no usable GPU"), std::string::npos) << e.what();
  }
}

TEST(NcclCollectives, OneRankCommunicatorRunsEveryOperation) {
  SKIP_WITHOUT_GPU();
  MemoryStore store;
  auto c = make_nccl_collectives(store, 0, 1);
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_STREQ(c->backend(), "nccl");

  const size_t n = 1 << 20;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000);
  DeviceBuffer d(0, n);
  d.upload(host);
  c->all_reduce(d.span());
  c->all_reduce_async(d.span(), ReduceOp::average).wait();
  c->reduce_scatter(d.span());
  c->broadcast(d.span(), 0);
  c->all_gather(d.span(), d.span());
  c->barrier();
  DeviceBuffer received(0, n);
  c->send_recv(d.span(), 0, received.span(), 0);
  std::vector<float> back(n);
  received.download(back);
  EXPECT_EQ(back, host);  // one rank: every operation is the identity
  const CollectiveStats s = c->stats();
  EXPECT_EQ(s.total().ops, 7);
  EXPECT_EQ(s.total().bytes, 0);  // nothing crosses a network with one rank
}

TEST(NcclCollectives, OneRankAllToAllCopiesItsChunkOnTheDevice) {
  SKIP_WITHOUT_GPU();
  MemoryStore store;
  auto c = make_nccl_collectives(store, 0, 1);
  const std::vector<float> host{1, 2, 3, 4, 5};
  DeviceBuffer in(0, host.size()), out(0, host.size());
  in.upload(host);
  const std::vector<int64_t> counts{5};
  c->all_to_all(in.span(), counts, out.span(), counts);
  std::vector<float> back(host.size());
  out.download(back);
  EXPECT_EQ(back, host);
  EXPECT_EQ(c->stats()[CollectiveKind::all_to_all].ops, 1);
}

}  // namespace
}  // namespace quartet::transport

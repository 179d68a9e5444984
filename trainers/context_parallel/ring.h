#pragma once

// Ring attention's ring over one group's collectives (the whole arm under
// context_parallel, a cp line of a mesh).

#include <functional>
#include <span>
#include <vector>

#include "engine/ops.h"
#include "trainers/data_parallel/reducer.h"
#include "trainers/metrics.h"
#include "transport/collectives.h"
#include "workloads/models.h"

namespace quartet::trainers::context_parallel {

// The ring of one context-parallel group over that group's collectives (whichever ranks
// they join): rank r of the group holds context_parallel_positions(context, r, size) and
// sends its blocks to r + 1, receiving from r - 1. Counts what it sends and the time
// compute waited for it.
class CollectivesRing final : public engine::AttentionRing {
 public:
  CollectivesRing(transport::Collectives& comm, int64_t context) : comm_(comm) {
    for (int r = 0; r < comm.size(); ++r)
      positions_.push_back(workloads::context_parallel_positions(context, r, comm.size()));
  }
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  const std::vector<int64_t>& positions(int rank) const override { return positions_.at(static_cast<size_t>(rank)); }

  std::function<void()> shift(const engine::Tensor& send, engine::Tensor& recv) override {
    const int n = size(), me = rank();
    const size_t count = static_cast<size_t>(send.numel());
    transport::Work work = comm_.send_recv_async(std::span<const float>(send.device_data(), count), (me + 1) % n,
                                                 std::span<float>(recv.device_data(), count), (me + n - 1) % n);
    const int64_t bytes = send.numel() * 4;
    return [this, work, bytes] {
      Stopwatch clock;
      work.wait();
      wait_seconds += clock.seconds();
      counters.add(transport::CollectiveKind::send_recv, bytes, comm_, work.seconds());
    };
  }

  CommCounters counters;      // the key/value blocks and their gradients
  double wait_seconds = 0.0;  // compute waiting for them, inside forward and backward

 private:
  transport::Collectives& comm_;
  std::vector<std::vector<int64_t>> positions_;
};

}  // namespace quartet::trainers::context_parallel

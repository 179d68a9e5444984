#pragma once

// The all-to-all that expert parallelism dispatches tokens and combines their outputs
// with (engine::RowExchanger), over one group's Collectives: the expert-parallel group's,
// which a device mesh may make a sub-group of the ranks.

#include "engine/ops.h"
#include "transport/collectives.h"

namespace quartet::trainers {

class CollectivesExchanger final : public engine::RowExchanger {
 public:
  explicit CollectivesExchanger(transport::Collectives& group) : group_(group) {}
  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  void all_to_all(const std::vector<float>& in, const std::vector<int64_t>& send, std::vector<float>& out,
                  const std::vector<int64_t>& recv) override {
    group_.all_to_all(in, send, out, recv);
  }

 private:
  transport::Collectives& group_;
};

}  // namespace quartet::trainers

#include "trainers/mesh/cost_model.h"

#include <gtest/gtest.h>

#include "transport/link.h"

namespace quartet::trainers::mesh {
namespace {

using nlohmann::json;

json step(double forward, const json& axes) {
  return {{"type", "step"},
          {"compute", {{"forward", forward}, {"backward", 0.0}, {"optimizer", 0.0}, {"data", 0.0}}},
          {"comm", {{"axes", axes}, {"intra_link", "nvlink"}}}};
}

// tp and cp within a node on the intra link, dp, pp and ep on the projected one; two
// steps' counts added, each rank a leg.
TEST(MeshCostModel, PricesEachAxisOnItsOwnLinkLevel) {
  const json axes = {{"tp", {{"bytes", 100}, {"messages", 2}}},
                     {"cp", {{"bytes", 10}, {"messages", 1}}},
                     {"dp", {{"bytes", 1000}, {"messages", 4}}},
                     {"pp", {{"bytes", 7}, {"messages", 3}}},
                     {"ep", {{"bytes", 5}, {"messages", 1}}}};
  const CriticalPath path = critical_path({{"rank0", {step(1.0, axes), step(2.0, axes)}}, {"rank1", {step(0.5, axes)}}});
  ASSERT_EQ(path.stages.size(), 1u);
  ASSERT_EQ(path.stages[0].parallel.size(), 2u);
  const PathLeg& leg = path.stages[0].parallel[0];
  EXPECT_DOUBLE_EQ(leg.compute, 3.0);
  EXPECT_DOUBLE_EQ(leg.intra_bytes, 2 * 110.0);
  EXPECT_DOUBLE_EQ(leg.intra_messages, 2 * 3.0);
  EXPECT_DOUBLE_EQ(leg.bytes, 2 * 1012.0);
  EXPECT_DOUBLE_EQ(leg.messages, 2 * 8.0);
  EXPECT_EQ(leg.intra_link, "nvlink");
  EXPECT_DOUBLE_EQ(leg.intra_bandwidth_bits_per_s, transport::link_profile("nvlink").bandwidth_bits_per_s);
}

TEST(MeshCostModel, RecordsWithoutAxesGiveNoPath) {
  const json plain = {{"type", "step"}, {"compute", {{"forward", 1.0}}}, {"comm", json::object()}};
  EXPECT_TRUE(critical_path({{"rank0", {plain}}}).stages.empty());
}

}  // namespace
}  // namespace quartet::trainers::mesh

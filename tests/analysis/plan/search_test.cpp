#include "analysis/plan/search.h"

#include <gtest/gtest.h>

#include <set>

namespace quartet::analysis::plan {
namespace {

ClusterProfile dgx() { return load_cluster_file(std::string(QUARTET_SOURCE_DIR) + "/clusters/dgx-h100.json"); }

TEST(Search, MeshesAreEveryFactoringOfADivisor) {
  // 4 devices over dp and tp: (1,1) (1,2) (1,4) (2,1) (2,2) (4,1).
  const std::vector<Mesh> meshes = enumerate_meshes(4, {"dp", "tp"});
  EXPECT_EQ(meshes.size(), 6u);
  std::set<std::string> shown;
  for (const Mesh& m : meshes) {
    EXPECT_EQ(4 % m.ranks(), 0);
    shown.insert(m.text());
  }
  EXPECT_EQ(shown.size(), 6u);
  // A new axis is one more name: 2 devices over four axes, 1 + 4 meshes.
  EXPECT_EQ(enumerate_meshes(2, {"dp", "tp", "pp", "cp"}).size(), 5u);
}

TEST(Search, GptMiniOnTwoDgxH100sIsRankedAndFits) {
  PlanArm base;
  base.batch = 64;
  base.model = "gpt-mini";
  const SearchResult r = search(model_shape("gpt-mini"), base, dgx());
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_GT(r.tried, 100);
  for (size_t i = 1; i < r.ranked.size(); ++i)
    EXPECT_LE(r.ranked[i - 1].prediction.step_seconds, r.ranked[i].prediction.step_seconds);
  for (const Candidate& c : r.ranked) EXPECT_TRUE(c.prediction.fits);
  // gpt-mini has 4 heads: no mesh with tp 8 or 16 is among them.
  for (const Candidate& c : r.ranked) EXPECT_LE(c.arm.mesh.tp, 4);
}

// A model with experts adds the ep axis: ep 2 and 4 (dividing the 4 experts) are among the
// ranked meshes, never 8 or 16, nor tp or cp, which gpt-moe is not split by.
TEST(Search, AMixtureOfExpertsSearchesTheEpAxis) {
  PlanArm base;
  base.batch = 64;
  base.model = "gpt-moe";
  const SearchResult r = search(model_shape("gpt-moe"), base, dgx());
  std::set<int64_t> eps;
  for (const Candidate& c : r.ranked) {
    eps.insert(c.arm.mesh.ep);
    EXPECT_EQ(c.arm.mesh.tp * c.arm.mesh.cp, 1);
    if (c.arm.mesh.ep > 1) {
      EXPECT_EQ(c.arm.zero, 0);
    }
  }
  EXPECT_EQ(eps, (std::set<int64_t>{1, 2, 4}));
}

TEST(Search, TooBigAModelOnTooFewDevicesFitsNowhere) {
  ClusterProfile one = dgx();
  one.nodes = 1;
  one.devices_per_node = 1;
  PlanArm base;
  base.batch = 8;
  const SearchResult r = search(model_shape("gpt-145b"), base, one);
  EXPECT_TRUE(r.ranked.empty());
  EXPECT_GT(r.too_big, 0);
}

TEST(Search, RegimeForAMeshNamesTheOneRegimeThatRunsIt) {
  PlanArm a;
  EXPECT_EQ(regime_for(a), "single");
  a.micro_batches = 4;
  EXPECT_EQ(regime_for(a), "accumulate");
  a.mesh.pp = 2;
  EXPECT_EQ(regime_for(a), "pipeline");
  a.mesh.dp = 2;
  EXPECT_EQ(regime_for(a), "");
}

}  // namespace
}  // namespace quartet::analysis::plan

// The variables cluster launchers set, read into a rank (quartet launch).

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "runner/cluster.h"
#include "runner/wiring.h"

namespace quartet::runner {
namespace {

using Vars = std::map<std::string, std::string>;
using Hosts = std::vector<std::string>;

EnvironmentLookup lookup(const Vars& vars) {
  return [&vars](const std::string& name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// The InputError message for `vars`, or "" when they are read.
std::string error_of(const Vars& vars, const std::string& coordinator = "") {
  try {
    cluster_rank(lookup(vars), coordinator);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string nodelist_error(const std::string& list) {
  try {
    expand_nodelist(list);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Nodelist, ExpandsRangesListsAndZeroPadding) {
  EXPECT_EQ(expand_nodelist("node01"), Hosts({"node01"}));
  EXPECT_EQ(expand_nodelist("a,b"), Hosts({"a", "b"}));
  EXPECT_EQ(expand_nodelist("node[01-03,07]"), Hosts({"node01", "node02", "node03", "node07"}));
  EXPECT_EQ(expand_nodelist("gpu[8-10]"), Hosts({"gpu8", "gpu9", "gpu10"}));
  EXPECT_EQ(expand_nodelist("node[098-101]"), Hosts({"node098", "node099", "node100", "node101"}));
  EXPECT_EQ(expand_nodelist("login1,node[1-2],x"), Hosts({"login1", "node1", "node2", "x"}));
  EXPECT_EQ(expand_nodelist("rack[1-2]-n[1,3]"), Hosts({"rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"}));
}

TEST(Nodelist, MalformedListsNameTheVariableAndTheAllowedForms) {
  for (const std::string bad : {"", "node[01-", "node]01", "a,,b", "node[3-1]", "node[a-b]", "node[[1]]", "n[]"}) {
    const std::string e = nodelist_error(bad);
    EXPECT_NE(e.find("SLURM_NODELIST"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("node[01-03,07]"), std::string::npos) << bad << ": " << e;
  }
}

TEST(ClusterRank, SlurmTakesTheNodeListsFirstHost) {
  const Vars v{{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"},
               {"SLURM_NODELIST", "node[07-08]"}, {"MASTER_PORT", "4000"}};
  const ClusterRank r = cluster_rank(lookup(v), "");
  EXPECT_EQ(r.style, "slurm");
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.local_rank, 0);
  EXPECT_EQ(r.host, "node07");
  EXPECT_EQ(r.port, 4000);
}

TEST(ClusterRank, SlurmWinsOverOpenMpiAndTorchrunAndTheDefaultPortIsTorchruns) {
  const Vars v{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODELIST", "a,b"},
               {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"RANK", "0"}, {"WORLD_SIZE", "8"}};
  const ClusterRank r = cluster_rank(lookup(v), "");
  EXPECT_EQ(r.style, "slurm");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.local_rank, -1);
  EXPECT_EQ(r.host, "a");
  EXPECT_EQ(r.port, kDefaultClusterPort);
}

TEST(ClusterRank, OpenMpiBeforeTorchrunWithTheCoordinatorFromTheOption) {
  const Vars v{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
               {"RANK", "0"}, {"WORLD_SIZE", "2"}};
  const ClusterRank r = cluster_rank(lookup(v), "10.0.0.5:7000");
  EXPECT_EQ(r.style, "openmpi");
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.host, "10.0.0.5");
  EXPECT_EQ(r.port, 7000);
  EXPECT_NE(error_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}).find("MASTER_ADDR: not set"),
            std::string::npos);
}

TEST(ClusterRank, TorchrunReadsMasterAddrAndPort) {
  const Vars v{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "head"},
               {"MASTER_PORT", "29400"}};
  const ClusterRank r = cluster_rank(lookup(v), "");
  EXPECT_EQ(r.style, "torchrun");
  EXPECT_EQ(r.world_size_variable, "WORLD_SIZE");
  EXPECT_EQ(r.host, "head");
  EXPECT_EQ(r.port, 29400);
}

TEST(ClusterRank, MissingOrBadVariablesAreNamedWithWhatIsAllowed) {
  EXPECT_NE(error_of({}).find("SLURM_PROCID"), std::string::npos);
  EXPECT_NE(error_of({}).find("allowed"), std::string::npos);
  const Vars torch{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}};
  auto with = [&](const std::string& k, const std::string& val) {
    Vars v = torch;
    if (val.empty()) v.erase(k);
    else v[k] = val;
    return error_of(v);
  };
  EXPECT_NE(with("WORLD_SIZE", "").find("WORLD_SIZE: not set"), std::string::npos);
  EXPECT_NE(with("WORLD_SIZE", "two").find("WORLD_SIZE: \"two\" is not allowed"), std::string::npos);
  EXPECT_NE(with("WORLD_SIZE", "0").find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(with("RANK", "-1").find("RANK: \"-1\""), std::string::npos);
  EXPECT_NE(with("RANK", "2").find("RANK: 2 is not below WORLD_SIZE (2)"), std::string::npos);
  EXPECT_NE(with("LOCAL_RANK", "x").find("LOCAL_RANK"), std::string::npos);
  EXPECT_NE(with("MASTER_ADDR", "").find("MASTER_ADDR: not set"), std::string::npos);
  EXPECT_NE(with("MASTER_PORT", "70000").find("MASTER_PORT: \"70000\" is not allowed; allowed: a TCP port"),
            std::string::npos);
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).find("SLURM_NODELIST: not set"),
            std::string::npos);
  EXPECT_NE(error_of(torch, "h:notaport").find("--coordinator"), std::string::npos);
  EXPECT_EQ(error_of(torch), "");
}

}  // namespace
}  // namespace quartet::runner

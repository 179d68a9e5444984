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

// A list of ranges may stand for billions of hosts: the first is found without
// expanding it, and expanding more than 100,000 is refused, quickly.
TEST(Nodelist, HugeListsAreRefusedWithoutExpandingThem) {
  EXPECT_EQ(first_nodelist_host("n[7-100],x"), "n7");
  EXPECT_EQ(first_nodelist_host("rack[03-9]-n[1,3]"), "rack03-n1");
  for (const std::string huge : {"n[0-100000]x[0-100000]", "n[0-999999999]", "a[1-60000],b[1-60000]"}) {
    EXPECT_NE(nodelist_error(huge).find("stands for more than 100000 hosts"), std::string::npos) << huge;
    try {
      first_nodelist_host(huge);
      ADD_FAILURE() << huge << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("SLURM_NODELIST"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(expand_nodelist("n[1-100000]").size(), 100000u);
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

// The launchers' variables as the real ones set them, on a one-node Slurm 22.05 cluster
// whose node is "vm" (Debian's slurm-wlm), Open MPI 4.1.4 and torchrun from PyTorch 2.15;
// each rank printed its environment (`env`), of which these are the launchers' own.
// srun -N1 -n2 (rank 1):
const Vars kSrun{{"SLURM_JOB_ID", "1"},         {"SLURM_JOB_NODELIST", "vm"},  {"SLURM_LOCALID", "1"},
                 {"SLURM_NNODES", "1"},         {"SLURM_NODEID", "0"},         {"SLURM_NODELIST", "vm"},
                 {"SLURM_NPROCS", "2"},         {"SLURM_NTASKS", "2"},         {"SLURM_PROCID", "1"},
                 {"SLURM_STEP_NODELIST", "vm"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_TASKS_PER_NODE", "2"}};
// sbatch -N1 -n2 running `mpirun -np 2` (rank 1): every rank inherits the batch step's
// SLURM_PROCID=0 and SLURM_LOCALID=0.
const Vars kMpirunInSlurm{{"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                          {"OMPI_COMM_WORLD_NODE_RANK", "1"},  {"OMPI_COMM_WORLD_RANK", "1"},
                          {"OMPI_COMM_WORLD_SIZE", "2"},       {"OMPI_UNIVERSE_SIZE", "2"},
                          {"SLURM_JOB_NODELIST", "vm"},        {"SLURM_LOCALID", "0"},
                          {"SLURM_NNODES", "1"},               {"SLURM_NODEID", "0"},
                          {"SLURM_NODELIST", "vm"},            {"SLURM_NPROCS", "2"},
                          {"SLURM_NTASKS", "2"},               {"SLURM_PROCID", "0"}};
// `srun -N1 -n1 -c2 torchrun --nproc-per-node 2 --standalone --no-python CMD` (rank 1):
// torchrun's own variables over the job step's, its agent's store on MASTER_PORT.
const Vars kTorchrunInSlurm{
    {"GROUP_RANK", "0"},          {"GROUP_WORLD_SIZE", "1"},     {"LOCAL_RANK", "1"},
    {"LOCAL_WORLD_SIZE", "2"},    {"MASTER_ADDR", "localhost"},  {"MASTER_PORT", "45401"},
    {"OMP_NUM_THREADS", "1"},     {"RANK", "1"},                 {"ROLE_NAME", "default"},
    {"ROLE_RANK", "1"},           {"ROLE_WORLD_SIZE", "2"},      {"SLURM_JOB_NODELIST", "vm"},
    {"SLURM_LOCALID", "0"},       {"SLURM_NNODES", "1"},         {"SLURM_NODEID", "0"},
    {"SLURM_NODELIST", "vm"},     {"SLURM_NPROCS", "1"},         {"SLURM_NTASKS", "1"},
    {"SLURM_PROCID", "0"},        {"SLURM_STEP_NODELIST", "vm"}, {"SLURM_STEP_NUM_TASKS", "1"},
    {"TORCHELASTIC_MAX_RESTARTS", "0"}, {"TORCHELASTIC_RESTART_COUNT", "0"},
    {"TORCHELASTIC_RUN_ID", "71c8ead9-e4e0-4a42-bcb4-5ee6fed48bf0"},
    {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"WORLD_SIZE", "2"}};

TEST(ClusterRank, SrunAloneIsReadAsSlurmWithTheDefaultPort) {
  const ClusterRank r = cluster_rank(lookup(kSrun), "");
  EXPECT_EQ(r.style, "slurm");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.world_size, 2);
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.host, "vm");
  EXPECT_EQ(r.port, kDefaultClusterPort);
  EXPECT_TRUE(r.ignored.empty());
}

// The innermost launcher wins: mpirun's variables over the Slurm job's around it, whose
// node list still names rank 0's host (Open MPI names none).
TEST(ClusterRank, MpirunInsideSlurmReadsOpenMpisVariables) {
  const ClusterRank r = cluster_rank(lookup(kMpirunInSlurm), "");
  EXPECT_EQ(r.style, "openmpi");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.world_size, 2);
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.host, "vm");
  EXPECT_EQ(r.port, kDefaultClusterPort);
  EXPECT_EQ(r.ignored, std::vector<std::string>{"SLURM_PROCID (slurm)"});
  Vars with_master = kMpirunInSlurm;
  with_master["MASTER_ADDR"] = "10.0.0.9";
  EXPECT_EQ(cluster_rank(lookup(with_master), "").host, "10.0.0.9");
}

// torchrun's agent listens on MASTER_PORT: the coordinator takes the next port.
TEST(ClusterRank, TorchrunInsideSlurmReadsTorchrunsVariablesAndAvoidsItsStorePort) {
  const ClusterRank r = cluster_rank(lookup(kTorchrunInSlurm), "");
  EXPECT_EQ(r.style, "torchrun");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.world_size, 2);
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.host, "localhost");
  EXPECT_EQ(r.port, 45402);
  EXPECT_NE(r.port_note.find("torchrun's agent listens on MASTER_PORT"), std::string::npos);
  EXPECT_EQ(r.ignored, std::vector<std::string>{"SLURM_PROCID (slurm)"});
  // --coordinator HOST:PORT is taken as given; MASTER_PORT 65535 leaves no port after it.
  EXPECT_EQ(cluster_rank(lookup(kTorchrunInSlurm), "h:7000").port, 7000);
  Vars last = kTorchrunInSlurm;
  last["MASTER_PORT"] = "65535";
  EXPECT_NE(error_of(last).find("MASTER_PORT: 65535 leaves no port"), std::string::npos);
}

TEST(ClusterRank, OpenMpiWithTheCoordinatorFromTheOption) {
  const Vars v{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}};
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

#pragma once

// Where this process sits in a job whose ranks a cluster launcher started (srun, mpirun,
// torchrun), read from the variables those launchers set: `quartet launch`.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace quartet::runner {

// The coordinator's port when neither --coordinator nor MASTER_PORT gives one (torchrun's).
constexpr uint16_t kDefaultClusterPort = 29500;

struct ClusterRank {
  std::string style;        // "slurm", "openmpi" or "torchrun": whose variables were read
  int rank = 0;
  int world_size = 1;
  int local_rank = -1;      // the rank's place on its host; -1: the launcher did not say
  std::string world_size_variable;  // the variable world_size came from, for messages
  std::string host;         // the coordinator's host (rank 0's)
  uint16_t port = kDefaultClusterPort;
  std::string port_note;    // why the port is not the one given, or ""
  // Other launchers' rank variables that were set too and not read ("SLURM_PROCID
  // (slurm)"): an outer launcher's, e.g. the Slurm job's around mpirun or torchrun.
  std::vector<std::string> ignored;
};

// Reads a variable; nullptr when unset.
using EnvironmentLookup = std::function<const char*(const std::string& name)>;

// The hosts of a Slurm node list ("node[01-03,07]", "a,b", "rack[1-2]-n[1,3]"), in order;
// InputError naming SLURM_NODELIST and the allowed forms when malformed.
std::vector<std::string> expand_nodelist(const std::string& list);

// The first host of a Slurm node list, found without expanding the list (a list of
// ranges may stand for billions of hosts); InputError as expand_nodelist's.
std::string first_nodelist_host(const std::string& list);

// This process's rank from the innermost launcher whose rank variable is set: RANK
// (torchrun), then OMPI_COMM_WORLD_RANK (mpirun), then SLURM_PROCID (srun), since
// torchrun and mpirun run inside Slurm jobs and their processes inherit SLURM_*.
// `coordinator` (--coordinator HOST or HOST:PORT, may be empty) overrides the style's
// coordinator host (Slurm: the node list's first host; Open MPI: MASTER_ADDR, else the
// node list's first host inside a Slurm job; torchrun: MASTER_ADDR) and port (MASTER_PORT,
// else kDefaultClusterPort; under torchrun's agent store MASTER_PORT + 1). InputError
// naming the variable, what is wrong and what is allowed.
ClusterRank cluster_rank(const EnvironmentLookup& env, const std::string& coordinator);

}  // namespace quartet::runner

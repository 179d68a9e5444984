#pragma once

// Collectives over some of the world's ranks (MPI_Comm_split, Gloo's and NCCL's
// sub-communicators): a mesh gives each of its axes one group per line of ranks. Every
// backend rendezvouses through a store, so a sub-group is the backend made over a
// prefixed store: the group's members find each other under the group's own keys, and
// groups served by one store never meet. Each group has its own worker, its own counters
// and its own connections (Gloo's pairs, an shm segment, an NCCL communicator).

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/collectives.h"

namespace gloo::rendezvous {
class Store;
}

namespace quartet::transport {

// A group of world ranks: its name tells it apart among the groups one store serves
// (e.g. "tp/3"); members are world ranks, each once, in the order that numbers them
// within the group (member i is the group's rank i).
struct SubGroup {
  std::string name;
  std::vector<int> members;
};

// world_rank's rank within g. Throws std::invalid_argument when it is not a member.
int place_in(const SubGroup& g, int world_rank);

// A backend's factory: make_shm_collectives, make_gloo_collectives or
// make_nccl_collectives with their options bound (nccl: the rank's device).
using MakeCollectives =
    std::function<std::unique_ptr<Collectives>(gloo::rendezvous::Store& store, int rank, int size)>;

// world_rank's collectives over g: `make` over `store` prefixed by "group/<name>/", with
// the rank's place in g and g's size. Every member calls it with the same g (and a store
// under the same prefix); members of different groups may call it at once. Throws
// std::invalid_argument for a bad group (empty, a rank twice, world_rank not in it) and
// what `make` throws.
std::unique_ptr<Collectives> make_sub_group(gloo::rendezvous::Store& store, int world_rank, const SubGroup& g,
                                            const MakeCollectives& make);

}  // namespace quartet::transport

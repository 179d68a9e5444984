#include "transport/sub_group.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include <gloo/rendezvous/prefix_store.h>

namespace quartet::transport {

int place_in(const SubGroup& g, int world_rank) {
  const auto it = std::find(g.members.begin(), g.members.end(), world_rank);
  if (it == g.members.end())
    throw std::invalid_argument("group \"" + g.name + "\": rank " + std::to_string(world_rank) +
                                " is not one of its members");
  return static_cast<int>(it - g.members.begin());
}

std::unique_ptr<Collectives> make_sub_group(gloo::rendezvous::Store& store, int world_rank, const SubGroup& g,
                                            const MakeCollectives& make) {
  if (g.name.empty() || g.members.empty())
    throw std::invalid_argument("a group needs a name and at least one member");
  if (std::set<int>(g.members.begin(), g.members.end()).size() != g.members.size())
    throw std::invalid_argument("group \"" + g.name + "\": a rank is listed twice");
  const int rank = place_in(g, world_rank);
  gloo::rendezvous::PrefixStore prefixed("group/" + g.name + "/", store);
  return make(prefixed, rank, static_cast<int>(g.members.size()));
}

}  // namespace quartet::transport

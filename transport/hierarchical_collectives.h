#pragma once

// Hierarchical collectives (Horovod's hierarchical all-reduce, NCCL's tree across nodes):
// the ranks of one host reduce through shared memory (shm_collectives.h), one leader per
// host all-reduces the hosts' sums over Gloo (gloo_collectives.h), and each leader
// broadcasts the result to its host through shared memory again. Only the leaders'
// traffic crosses between hosts: 2(H-1)/H * S each for H hosts, where a flat ring sends
// 2(N-1)/N * S from every one of the N ranks.
//
// Ranks find their hosts themselves: each publishes a host key through the rendezvous
// store, ranks with equal keys share a host. Hosts need not hold contiguous ranks.
//
// All-reduce is the one hierarchical operation; reduce-scatter and all-gather are made
// of it (correct, not bandwidth-optimal), which is why data_parallel refuses ZeRO with it.

#include <memory>
#include <string>
#include <vector>

#include "transport/gloo_collectives.h"
#include "transport/shm_collectives.h"

namespace quartet::transport {

// This machine as ranks tell hosts apart: hostname, boot id and the network namespace
// (/proc/self/ns/net), so network namespaces on one machine count as hosts of their own.
std::string host_key();
// host_key(), or with QUARTET_SIMULATED_HOSTS=H (tests, benchmarks on one machine) that
// of simulated host rank % H of this machine.
std::string host_key_from_environment(int rank);

// The hosts of a group, from every rank's host key (keys[r] is rank r's). Hosts are
// numbered in the order of their lowest rank; a rank's local rank is its place among its
// host's ranks in rank order, and local rank 0 is the host's leader.
struct HostLayout {
  std::vector<int> host_of;    // per rank
  std::vector<int> local_of;   // per rank
  std::vector<int> host_size;  // per host
  int hosts() const { return static_cast<int>(host_size.size()); }
};
HostLayout host_layout(const std::vector<std::string>& keys);

struct HierarchicalOptions {
  ShmOptions intra;
  GlooOptions inter;
};

// Rank `rank` of `size`, on the host named `key` (host_key(), or another string to
// simulate hosts on one machine). Every rank calls it with the same store and size;
// returns once the host's shared-memory group and, on leaders, the Gloo group of
// leaders are connected. Throws std::runtime_error naming what failed.
std::unique_ptr<Collectives> make_hierarchical_collectives(gloo::rendezvous::Store& store, int rank, int size,
                                                           const std::string& key,
                                                           const HierarchicalOptions& options = {});

}  // namespace quartet::transport

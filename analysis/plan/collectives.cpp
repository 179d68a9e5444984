#include "analysis/plan/collectives.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace quartet::analysis::plan {

Algorithm algorithm_named(const std::string& name) {
  if (name == "ring") return Algorithm::ring;
  if (name == "tree") return Algorithm::tree;
  if (name == "hierarchical") return Algorithm::hierarchical;
  throw std::invalid_argument("collective algorithm " + name + ": expected ring, tree or hierarchical");
}

double message_seconds(double bytes, const Link& link) {
  return link.latency_s + (link.bandwidth_bytes_per_s > 0 ? bytes / link.bandwidth_bytes_per_s : 0.0);
}

double ring_all_reduce_seconds(double bytes, int ranks, const Link& link) {
  if (ranks <= 1) return 0.0;
  return 2.0 * (ranks - 1) * message_seconds(bytes / ranks, link);
}

double tree_all_reduce_seconds(double bytes, int ranks, const Link& link) {
  if (ranks <= 1) return 0.0;
  const double depth = std::ceil(std::log2(static_cast<double>(ranks)));
  return 2.0 * depth * link.latency_s + 2.0 * message_seconds(bytes, Link{link.bandwidth_bytes_per_s, 0.0});
}

double ring_all_gather_seconds(double bytes, int ranks, const Link& link) {
  if (ranks <= 1) return 0.0;
  return (ranks - 1) * message_seconds(bytes / ranks, link);
}

double all_to_all_seconds(double bytes, int ranks, const Link& link) { return ring_all_gather_seconds(bytes, ranks, link); }

namespace {

// Bytes one rank of a ring of n sends for `steps_per_rank` × (n−1) steps of S/n.
double ring_bytes(double bytes, int n, double passes) { return n > 1 ? passes * (n - 1) * bytes / n : 0.0; }

// A node's NICs side by side: the link one leader (or the node's traffic) sees.
Link widened(const Link& l, int nics) { return {l.bandwidth_bytes_per_s * std::max(1, nics), l.latency_s}; }

}  // namespace

CollectiveCost all_reduce(Algorithm a, double bytes, int per_node, int nodes, const Link& intra, const Link& inter,
                          int nics) {
  const int n = per_node * nodes;
  CollectiveCost c;
  if (n <= 1) return c;
  if (nodes == 1) {
    c.seconds = a == Algorithm::tree ? tree_all_reduce_seconds(bytes, n, intra) : ring_all_reduce_seconds(bytes, n, intra);
    c.intra_bytes = a == Algorithm::tree ? 2 * bytes : ring_bytes(bytes, n, 2);
    return c;
  }
  if (a == Algorithm::hierarchical) {
    // Each of the per_node ranks owns S/G after the intra reduce-scatter and all-reduces it
    // with its peers on the other nodes: G rings side by side sharing the node's NICs.
    const double shard = bytes / per_node;
    const Link per_ring{inter.bandwidth_bytes_per_s * std::max(1, nics) / per_node, inter.latency_s};
    c.seconds = 2 * ring_all_gather_seconds(bytes, per_node, intra) + ring_all_reduce_seconds(shard, nodes, per_ring);
    c.intra_bytes = ring_bytes(bytes, per_node, 2);
    c.inter_bytes = ring_bytes(shard, nodes, 2);
    return c;
  }
  // Flat across nodes: every step waits for the ring's slowest edge. NCCL builds one ring
  // per NIC (up to one per rank of a node), each carrying its share of S, so the
  // inter-node edge runs at the NICs side by side, and a rank's intra link carries all
  // the rings' shares.
  const Link hop = widened(inter, std::min(nics, per_node));
  Link slow = per_node > 1 && intra.bandwidth_bytes_per_s < hop.bandwidth_bytes_per_s ? intra : hop;
  slow.latency_s = std::max(intra.latency_s, inter.latency_s);
  c.seconds = a == Algorithm::tree ? tree_all_reduce_seconds(bytes, n, slow) : ring_all_reduce_seconds(bytes, n, slow);
  const double sent = a == Algorithm::tree ? 2 * bytes : ring_bytes(bytes, n, 2);
  // In a ring over nodes of G ranks each, one edge in G leaves the node.
  c.inter_bytes = sent / per_node;
  c.intra_bytes = sent - c.inter_bytes;
  return c;
}

CollectiveCost all_gather(double bytes, int per_node, int nodes, const Link& intra, const Link& inter) {
  const int n = per_node * nodes;
  CollectiveCost c;
  if (n <= 1) return c;
  const Link& slow = nodes > 1 ? inter : intra;
  c.seconds = ring_all_gather_seconds(bytes, n, slow);
  const double sent = ring_bytes(bytes, n, 1);
  c.inter_bytes = nodes > 1 ? sent / per_node : 0.0;
  c.intra_bytes = sent - c.inter_bytes;
  return c;
}

CollectiveCost all_to_all(double bytes, int per_node, int nodes, const Link& intra, const Link& inter, int nics) {
  const int n = per_node * nodes;
  CollectiveCost c;
  if (n <= 1) return c;
  // A rank sends S/n to each other rank: (per_node−1) of them in its node, the rest out,
  // the node's ranks sharing its NICs.
  const double chunk = bytes / n;
  c.intra_bytes = chunk * (per_node - 1);
  c.inter_bytes = chunk * (n - per_node);
  const double intra_s = (per_node - 1) * message_seconds(chunk, intra);
  const double inter_s =
      nodes > 1 ? (n - per_node) * inter.latency_s +
                      c.inter_bytes * per_node / (inter.bandwidth_bytes_per_s * std::max(1, nics))
                : 0.0;
  c.seconds = std::max(intra_s, inter_s);
  return c;
}

}  // namespace quartet::analysis::plan

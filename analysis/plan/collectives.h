#pragma once

// Collectives under the α-β model: a message of n bytes on a link costs α + n / β
// (latency α, bandwidth β one way). Each algorithm's time is its steps on the critical
// path; each also says the bytes one rank sends, per link level.
//
//   ring all-reduce        2 (N−1) steps of S/N:      2 (N−1) (α + S / (N β))
//   tree all-reduce        reduce up and broadcast down a binary tree, S pipelined in
//                          chunks: 2 ⌈log2 N⌉ α + 2 S / β
//   ring reduce-scatter    (N−1) (α + S / (N β)); all-gather the same (S: the whole buffer)
//   all-to-all             (N−1) (α + S / (N β)) pairwise, S a rank's whole buffer
//   hierarchical           reduce-scatter within each node (G devices), all-reduce of
//                          S/G across the M nodes on the node's NICs side by side,
//                          all-gather within the node
//   point to point         α + S / β

#include <string>

namespace quartet::analysis::plan {

struct Link {
  double bandwidth_bytes_per_s = 0.0;  // 0: free
  double latency_s = 0.0;
};

struct CollectiveCost {
  double seconds = 0.0;
  double intra_bytes = 0.0;  // one rank sends within a node
  double inter_bytes = 0.0;  // one rank sends between nodes
};

enum class Algorithm { ring, tree, hierarchical };
Algorithm algorithm_named(const std::string& name);  // std::invalid_argument naming the three

double message_seconds(double bytes, const Link& link);
double ring_all_reduce_seconds(double bytes, int ranks, const Link& link);
double tree_all_reduce_seconds(double bytes, int ranks, const Link& link);
double ring_all_gather_seconds(double bytes, int ranks, const Link& link);  // = reduce-scatter's
double all_to_all_seconds(double bytes, int ranks, const Link& link);

// A group of `per_node` ranks on each of `nodes` nodes (ranks = per_node × nodes).
// Inside one node (nodes == 1) every algorithm runs on `intra`; across nodes, ring and
// tree run flat on `inter` (the slowest link of the ring decides), hierarchical in two
// levels with the node's `nics` inter links side by side.
CollectiveCost all_reduce(Algorithm a, double bytes, int per_node, int nodes, const Link& intra, const Link& inter,
                          int nics = 1);
// All-gather and reduce-scatter (ZeRO, sequence parallelism): a ring; across nodes its
// slowest link decides.
CollectiveCost all_gather(double bytes, int per_node, int nodes, const Link& intra, const Link& inter);
CollectiveCost all_to_all(double bytes, int per_node, int nodes, const Link& intra, const Link& inter, int nics = 1);

}  // namespace quartet::analysis::plan

#pragma once

// One arm as the planner sees it: a regime on a mesh of ranks, its batch and its knobs.
// The device mesh is dp × tp × pp × cp × ep ranks, tp innermost (Megatron's order:
// tp, cp, ep, dp, pp), so the innermost axes share a node's fast link.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace quartet::analysis::plan {

// The mesh's axes, innermost first. A new axis is a new entry here and in Mesh::size.
inline constexpr std::array<const char*, 5> kMeshAxes = {"tp", "cp", "ep", "dp", "pp"};

struct Mesh {
  int64_t tp = 1, cp = 1, ep = 1, dp = 1, pp = 1;

  int64_t ranks() const { return tp * cp * ep * dp * pp; }
  // An axis's size by its kMeshAxes name; std::invalid_argument for another name.
  int64_t& size(const std::string& axis);
  int64_t size(const std::string& axis) const;
  // Ranks between neighbours of `axis`: the product of the axes inside it.
  int64_t stride(const std::string& axis) const;
  std::string text() const;  // "dp2×tp4", or "1" for one rank
  bool operator==(const Mesh&) const = default;
};

struct PlanArm {
  std::string name;
  std::string regime;           // single, accumulate, data_parallel, tensor_parallel, pipeline, context_parallel,
                                // expert_parallel, mesh, split, federated
  std::string model;
  int64_t batch = 1;            // samples per optimizer step, all ranks together
  Mesh mesh;
  int64_t micro_batches = 1;    // accumulate, pipeline; data_parallel: per rank
  std::string schedule = "1f1b";  // pipeline: gpipe, 1f1b; sequential: micro-batches through the stages in turn (mesh)
  // 1f1b: model chunks a rank holds (Narayanan et al.'s interleaved schedule, §2.2.2: the
  // bubble shrinks to (P − 1)/v slots, the sends between stages grow v-fold). The
  // planner prices it; the runtime trains 1 (docs/pipeline.md).
  int64_t virtual_stages = 1;
  std::vector<std::string> cuts;  // pipeline, split: the last stage before each cut; empty: balanced
  int64_t zero = 0;             // data_parallel: ZeRO stage 0..3
  bool checkpointing = false;   // recompute each stage's activations in backward
  bool sequence_parallel = false;
  std::string precision = "fp32";  // fp32; bf16, fp16: mixed precision (fp32 master weights)
  std::string algorithm = "ring";  // ring, tree, hierarchical
  double bucket_bytes = 25.0 * 1024 * 1024;
  std::string optimizer = "adam";  // adam (two states), sgd (momentum: one)
  int threads = 0;              // cpu devices: cores a rank uses; 0: the node's cores shared out
  // split and federated
  int64_t clients = 1;
  double fraction = 1.0;        // federated: clients asked per round
  int64_t local_epochs = 1;
  int64_t client_samples = 0;   // federated: samples a client holds; 0: batch
  // federated, when known (a finished run's records): each round's clients by the pool
  // (process) that trained them, as the samples each trained; empty: every client holds
  // client_samples and the pools take the clients asked in turn.
  std::vector<std::vector<std::vector<int64_t>>> client_rounds;
  std::string variant = "vanilla";  // split: vanilla, ushaped, splitfed
  double link_bandwidth_bytes_per_s = 0.0;  // split, federated: the arm's own link; 0: the cluster's
  double link_latency_s = 0.0;
  std::string link;             // its name, for the table
};

}  // namespace quartet::analysis::plan

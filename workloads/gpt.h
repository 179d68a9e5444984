#pragma once

// A GPT-style decoder over bytes (Radford et al. 2018; Karpathy's nanoGPT layout): token
// and position embeddings, pre-norm blocks of causal multi-head self-attention and a GELU
// MLP, each added back to the residual stream, a final layer norm and a linear head to a
// logit per byte value. Every Linear keeps its bias and PyTorch's default init;
// embeddings are N(0, 1). No dropout: the runs here are far shorter than overfitting
// takes. docs/models.md has the PyTorch definition (same parameter names and shapes).
//
// The same code builds one process's slice for tensor parallelism (Shoeybi et al. 2019,
// Megatron-LM): each block's query, key and value projections split by heads and its MLP's
// first matrix by output columns ("column parallel"), the attention output projection and
// the MLP's second matrix by input rows ("row parallel"), with f (all-reduce in backward)
// where the replicated residual stream enters each half-block and g (all-reduce in
// forward) where its partial sums leave: two all-reduces of the (B, T, width) activations
// forward and two backward per block.
//
// Or one process's part of context parallelism (ring attention, Liu et al. 2023): every
// parameter whole, the input this process's positions of every sequence (its ring's
// positions), the position embeddings taken at those positions and the attention
// engine::ring_attention over the ring; everything else is per token, so runs on the
// local tokens alone.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/model.h"
#include "engine/random.h"
#include "workloads/moe.h"

namespace quartet::engine {
class AttentionRing;  // engine/ops.h
}

namespace quartet::workloads {

struct GptConfig {
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t width = 128;    // the residual stream; heads divide it
  int64_t context = 128;  // positions the model takes
  int64_t vocab = 256;    // byte values
};

// The processes one tensor-parallel group splits each block over; size 1: none.
struct TensorParallelGroup {
  int rank = 0;
  int size = 1;
  engine::StatsReducer* reducer = nullptr;  // sums over the group; needed when size > 1
  // Sequence parallelism (Korthikanti et al. 2022): between the split regions each rank
  // holds positions [rank T/size, (rank+1) T/size) of every sequence, its input those
  // bytes; f and g become gathered_linears and scatter_sequence (engine/ops.h).
  bool sequence_parallel = false;
};

// Stages "embed", "block0" .. "block{layers-1}", "head". Input (N, T) byte values as
// floats, T <= context; output (N * T, vocab). With a group of size > 1 the blocks hold
// rank's slice (uninitialised: load the slices of a whole model's weights, see
// tensor_parallel_plan). Throws std::invalid_argument when the group's size does not
// divide the heads. With a ring (context parallel; no tensor-parallel group then) the
// input is (N, L), this process's L = ring->positions(ring->rank()).size() positions of
// N sequences, and the output (N * L, vocab) their logits; the ring must outlive the model.
std::shared_ptr<engine::Model> make_gpt(const GptConfig& config, engine::Generator& gen,
                                        const TensorParallelGroup& group = {}, engine::AttentionRing* ring = nullptr);

// Context parallelism's load-balanced causal split: the context cut into 2 * ranks equal
// chunks, rank r holding chunks r and 2 * ranks - 1 - r (every rank as much causal work:
// an early chunk's queries see few keys, a late one's many), ascending. Throws
// std::invalid_argument when 2 * ranks does not divide the context.
std::vector<int64_t> context_parallel_positions(int64_t context, int rank, int ranks);

// gpt-moe: make_gpt's model with the MLP of blocks every-1, 2 every-1, ... (moe.every)
// a mixture of experts (workloads/moe.h), named "block{i}.moe.router.weight",
// "block{i}.moe.experts.{e}.up.weight", ...; with an expert-parallel group each process
// holds its experts only. stats (may be null) collects the routing counts. Throws
// std::invalid_argument for settings check_moe_config refuses.
std::shared_ptr<engine::Model> make_gpt_moe(const GptConfig& config, const MoeConfig& moe, engine::Generator& gen,
                                            const ExpertGroup& ep = {}, std::shared_ptr<MoeStats> stats = nullptr);

// How a group's processes hold a whole model's parameter.
enum class TensorSplit {
  whole,       // every rank a copy (embeddings, layer norms, the head)
  rows,        // rank r the r-th of size equal slices of dim 0 (column-parallel weights, their biases)
  columns,     // rank r the r-th slice of dim 1 (row-parallel weights)
  first_rank,  // rank 0 only: a row-parallel layer's bias, added once before g's sum
};
// Every parameter of make_gpt(config, gen) with its split, in its order.
std::vector<std::pair<std::string, TensorSplit>> gpt_tensor_parallel_plan(const GptConfig& config);

}  // namespace quartet::workloads

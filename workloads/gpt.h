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

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/model.h"
#include "engine/random.h"
#include "workloads/moe.h"

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
};

// Stages "embed", "block0" .. "block{layers-1}", "head". Input (N, T) byte values as
// floats, T <= context; output (N * T, vocab). With a group of size > 1 the blocks hold
// rank's slice (uninitialised: load the slices of a whole model's weights, see
// tensor_parallel_plan). Throws std::invalid_argument when the group's size does not
// divide the heads.
std::shared_ptr<engine::Model> make_gpt(const GptConfig& config, engine::Generator& gen,
                                        const TensorParallelGroup& group = {});

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

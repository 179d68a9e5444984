#pragma once

// A model as the planner sees it: layers in order, each with its forward FLOPs, the
// bytes it moves, its parameters and the activations it keeps for backward, per sample.
// FLOPs are bench/flops.py's: only the multiply-adds of linear layers, convolutions and
// attention's two products, 2 FLOPs each; a training step is 3× forward less the first
// counted layer's input gradient. Elementwise layers (activations, norms, softmax,
// pooling, residual adds) count no FLOPs but move bytes: on a CPU they are a fair part
// of a small model's step.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace quartet::analysis::plan {

enum class OpClass { matmul, conv, attention, elementwise };
const char* op_class_name(OpClass op);

struct Layer {
  std::string name;
  std::string stage;              // the model's stage (workloads' stage names): pipeline and split cut here
  OpClass op = OpClass::matmul;
  double forward_flops = 0.0;     // per sample
  double moved_elements = 0.0;    // per sample: read and written by the forward pass
  double parameters = 0.0;
  double saved_elements = 0.0;    // per sample: kept from forward for backward
  double output_elements = 0.0;   // per sample: what leaves it (crosses a cut after it)
  bool tensor_parallel = false;   // split over a tensor-parallel group (Megatron's column/row pairs)
  bool expert = false;            // an MoE block's experts: their parameters spread over the ep axis
  // Matrix products: the weight's dimensions, and which one tensor parallelism splits
  // (row-parallel layers split the input, column-parallel ones the output).
  double in_features = 0.0;
  double out_features = 0.0;
  bool row_parallel = false;
  // The engine's elementwise ops this layer runs and the elements each runs over per
  // sample (an elementwise layer's own; a product's or convolution's bias pass), priced
  // by a profile that timed them (cluster.h's elementwise_ops).
  std::vector<std::pair<std::string, double>> kernels = {};
};

// A mixture of experts in a transformer's MLPs (workloads/moe.h's MoeConfig).
struct MoeDims {
  int64_t experts = 4;
  int64_t top_k = 2;
  int64_t every = 2;  // blocks every-1, 2 every-1, ... have experts
};

// A transformer's dimensions (workloads/gpt.h's GptConfig, the same definition).
struct GptDims {
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t width = 128;
  int64_t context = 128;
  int64_t vocab = 256;
  bool vocab_parallel = false;  // Megatron's: embedding and head split over tensor parallelism, and tied
  // Megatron's (2021) attention kernels: q k^T over the whole T×T square (the upper half
  // masked, not skipped), the scores written to memory and read back by a fused
  // scale-mask-softmax and by dropout, and dropout after each residual branch.
  // Otherwise (the engine's causal attention, as flash attention does it): the causal
  // pairs only, each head's scores kept in a buffer that never leaves the cache.
  bool scores_in_memory = false;
  std::optional<MoeDims> moe;   // gpt-moe: some blocks' MLP a mixture of experts
};

struct ModelShape {
  std::string name;
  std::vector<Layer> layers;
  std::vector<std::string> stages;  // in order
  int64_t tokens_per_sample = 1;    // a sequence's positions (transformers), else 1
  std::optional<GptDims> gpt;       // transformers: what tensor, context and pipeline parallelism split
};

// The shape of a named model: mlp, lenet5, cnn, conv3d-32, conv3d-64, unet3d (= unet3d-32),
// unet3d-32/64/128, gpt-mini, gpt-moe, gpt-moe-dropless, and the gpt family
// (gpt_family_names()). Throws std::invalid_argument naming the known ones.
ModelShape model_shape(const std::string& name);

// make_gpt's layout (workloads/gpt.h) at any size: embed, blocks, head.
ModelShape gpt_shape(const std::string& name, const GptDims& dims);
// The transformers of Narayanan et al. (SC'21) Table 1, "gpt-1.7b" .. "gpt-1t": the
// paper's layers, hidden size, heads, sequence length 2048 and vocabulary 51,200.
std::vector<std::string> gpt_family_names();

double forward_flops(const ModelShape& m);  // per sample
double train_flops(const ModelShape& m);    // per sample: bench/flops.py's train()
double parameter_count(const ModelShape& m);

}  // namespace quartet::analysis::plan

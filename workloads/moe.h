#pragma once

// The mixture-of-experts MLP of gpt-moe (Shazeer et al. 2017; GShard, Lepikhin et al.
// 2020; Switch Transformer, Fedus et al. 2021): a router (a Linear without bias, width ->
// E) gives each token E probabilities (softmax); the token goes to its k most probable
// experts (k = 1, Switch, the gate its probability; k = 2, GShard, the two gates divided
// by their sum); each expert is gpt-mini's MLP (width -> 4 width -> GELU -> width) and a
// token's output is the gate-weighted sum of its experts' outputs. An expert takes at most
// C = ceil(capacity_factor * R * k / E) of the R tokens of a forward pass, first choices
// before second choices, each in token order; a choice past C is dropped (it adds
// nothing: the residual stream carries the token on). capacity_factor 0: no limit.
// The Switch load-balancing loss alpha * E * sum_i f_i * P_i (f_i the fraction of tokens
// whose first choice is expert i, P_i the mean probability of expert i) is added to the
// training loss through engine::add_side_loss, and so is the router z-loss of ST-MoE
// (Zoph et al. 2022), beta * mean over the tokens of (log sum_i exp(router logit_i))^2,
// which keeps the router's logits small. docs/moe.md has the formulas and the PyTorch
// definition is in docs/models.md.
//
// With an expert-parallel group of N processes each holds E/N experts (rank r experts
// r E/N .. (r+1) E/N - 1); the tokens a rank routes to another rank's experts travel
// there by all-to-all and their outputs come back the same way.

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/model.h"
#include "engine/random.h"

namespace quartet::workloads {

struct GptConfig;

struct MoeConfig {
  int64_t experts = 4;
  int64_t top_k = 2;             // 1 (Switch) or 2 (GShard)
  double capacity_factor = 1.25; // 0: no limit, nothing dropped
  int64_t every = 2;             // blocks every-1, 2 every-1, ...: every other block; 1: every block
  double aux_loss = 0.01;        // alpha; 0: none
  double z_loss = 0.001;         // beta of the router z-loss; 0: none
};

// Routing counts summed over every forward pass since reset: choices made (tokens x k),
// choices dropped at capacity, and choices each expert took (E entries).
struct MoeStats {
  int64_t choices = 0;
  int64_t dropped = 0;
  std::vector<int64_t> load;
  void reset() { *this = MoeStats{}; }
};

// The processes one expert-parallel group spreads the experts over; size 1: none.
struct ExpertGroup {
  engine::RowExchanger* exchanger = nullptr;  // null: one process holds every expert
};

// The MoE MLP for one block: (B, T, width) -> (B, T, width). stats may be null.
std::shared_ptr<engine::Module> make_moe_mlp(const GptConfig& gpt, const MoeConfig& moe, engine::Generator& gen,
                                             const ExpertGroup& group, std::shared_ptr<MoeStats> stats);

// Whether block i of a gpt-moe holds an MoE MLP.
bool is_moe_block(const MoeConfig& moe, int64_t block);

// Throws std::invalid_argument naming the rule when the settings do not make a model:
// experts >= 1, 1 <= top_k <= min(2, experts), capacity_factor >= 0, every >= 1, aux_loss >= 0,
// z_loss >= 0, and a group whose size divides the experts.
void check_moe_config(const MoeConfig& moe, int group_size);

}  // namespace quartet::workloads

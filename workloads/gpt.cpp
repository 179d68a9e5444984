#include "workloads/gpt.h"

#include <stdexcept>

#include "engine/ops.h"

namespace quartet::workloads {
namespace {

using engine::Generator;
using engine::Linear;
using engine::Module;
using engine::Tensor;

// x (N, T, F) through a Linear as (N * T, F) rows.
Tensor linear_rows(Linear& layer, const Tensor& x) {
  const engine::Shape& s = x.shape();
  Tensor y = layer.forward(engine::reshape(x, {s[0] * s[1], s[2]}));
  return engine::reshape(y, {s[0], s[1], y.size(1)});
}

// f before a split region, the identity without a group. (With sequence parallelism the
// column-parallel layers gather their input themselves: engine::gathered_linears.)
Tensor enter_split(const Tensor& x, const TensorParallelGroup& g) {
  return g.size == 1 ? x : engine::all_reduce_backward(x, *g.reducer);
}
// g after it: the partial sums of the group's slices added up (with sequence parallelism,
// only this rank's slice of the sequence kept).
Tensor leave_split(const Tensor& x, const TensorParallelGroup& g) {
  if (g.size == 1) return x;
  return g.sequence_parallel ? engine::scatter_sequence(x, *g.reducer, g.size) : engine::all_reduce_forward(x, *g.reducer);
}

// Token and position embeddings, summed: (N, T) byte values -> (N, T, width).
class Embed final : public Module {
 public:
  Embed(const GptConfig& c, Generator& gen, const TensorParallelGroup& g, engine::AttentionRing* ring)
      : token_(std::make_shared<engine::Embedding>(c.vocab, c.width, gen)),
        position_(std::make_shared<engine::Embedding>(c.context, c.width, gen)),
        context_(c.context),
        ring_(ring),
        first_(g.sequence_parallel ? g.rank * c.context / g.size : 0) {
    register_module("token", token_);
    register_module("position", position_);
  }
  Tensor forward(const Tensor& x) override {
    if (x.dim() != 2 || x.size(1) < 1 || x.size(1) > context_)
      throw std::invalid_argument("gpt: input must be (N, T) byte values with 1 <= T <= " + std::to_string(context_) +
                                  ", got " + engine::shape_str(x.shape()));
    const int64_t n = x.size(0), t = x.size(1);
    if (ring_ && t != static_cast<int64_t>(ring_->positions(ring_->rank()).size()))
      throw std::invalid_argument("gpt: this context-parallel rank holds " +
                                  std::to_string(ring_->positions(ring_->rank()).size()) +
                                  " positions of every sequence, got input " + engine::shape_str(x.shape()));
    std::vector<float> positions(static_cast<size_t>(n * t));
    for (int64_t i = 0; i < n * t; ++i)
      positions[static_cast<size_t>(i)] =
          static_cast<float>(ring_ ? ring_->positions(ring_->rank())[static_cast<size_t>(i % t)] : first_ + i % t);
    const Tensor where = Tensor::from_vector({n, t}, positions).to(x.device());
    return engine::add(token_->forward(x), position_->forward(where));
  }

 private:
  std::shared_ptr<engine::Embedding> token_, position_;
  int64_t context_;
  engine::AttentionRing* ring_;
  int64_t first_;  // the first position of the input (sequence parallel: this rank's slice)
};

// Causal self-attention; with a group, this rank's heads only.
class Attention final : public Module {
 public:
  Attention(const GptConfig& c, Generator& gen, const TensorParallelGroup& g, engine::AttentionRing* ring)
      : group_(g), heads_(c.heads / g.size), ring_(ring) {
    const int64_t local = c.width / g.size;
    query_ = std::make_shared<Linear>(c.width, local, gen);
    key_ = std::make_shared<Linear>(c.width, local, gen);
    value_ = std::make_shared<Linear>(c.width, local, gen);
    out_ = std::make_shared<Linear>(local, c.width, gen, g.rank == 0);
    register_module("query", query_);
    register_module("key", key_);
    register_module("value", value_);
    register_module("out", out_);
  }
  Tensor forward(const Tensor& x) override {
    Tensor q, k, v;
    if (group_.sequence_parallel && group_.size > 1) {
      const engine::TensorList qkv = engine::gathered_linears(
          x, {{query_->weight, query_->bias}, {key_->weight, key_->bias}, {value_->weight, value_->bias}}, *group_.reducer,
          group_.size);
      q = qkv[0], k = qkv[1], v = qkv[2];
    } else {
      const Tensor in = enter_split(x, group_);
      q = linear_rows(*query_, in), k = linear_rows(*key_, in), v = linear_rows(*value_, in);
    }
    const Tensor a = ring_ ? engine::ring_attention(q, k, v, heads_, *ring_) : engine::causal_attention(q, k, v, heads_);
    return leave_split(linear_rows(*out_, a), group_);
  }

 private:
  TensorParallelGroup group_;
  int64_t heads_;
  engine::AttentionRing* ring_;
  std::shared_ptr<Linear> query_, key_, value_, out_;
};

// width -> 4 width -> GELU -> width; with a group, this rank's slice of the hidden units.
class Mlp final : public Module {
 public:
  Mlp(const GptConfig& c, Generator& gen, const TensorParallelGroup& g) : group_(g) {
    const int64_t hidden = 4 * c.width / g.size;
    up_ = std::make_shared<Linear>(c.width, hidden, gen);
    down_ = std::make_shared<Linear>(hidden, c.width, gen, g.rank == 0);
    register_module("up", up_);
    register_module("down", down_);
  }
  Tensor forward(const Tensor& x) override {
    const Tensor up = group_.sequence_parallel && group_.size > 1
                          ? engine::gathered_linears(x, {{up_->weight, up_->bias}}, *group_.reducer, group_.size)[0]
                          : linear_rows(*up_, enter_split(x, group_));
    const Tensor h = engine::gelu(up);
    return leave_split(linear_rows(*down_, h), group_);
  }

 private:
  TensorParallelGroup group_;
  std::shared_ptr<Linear> up_, down_;
};

// x + attn(ln1(x)), then + mlp(ln2(x)).
class Block final : public Module {
 public:
  Block(const GptConfig& c, Generator& gen, const TensorParallelGroup& g, engine::AttentionRing* ring)
      : ln1_(std::make_shared<engine::LayerNorm>(c.width)),
        attn_(std::make_shared<Attention>(c, gen, g, ring)),
        ln2_(std::make_shared<engine::LayerNorm>(c.width)),
        mlp_(std::make_shared<Mlp>(c, gen, g)) {
    register_all("mlp");
  }
  // gpt-moe's block: the MLP a mixture of experts, named "moe".
  Block(const GptConfig& c, const MoeConfig& m, Generator& gen, const ExpertGroup& ep,
        std::shared_ptr<MoeStats> stats)
      : ln1_(std::make_shared<engine::LayerNorm>(c.width)),
        attn_(std::make_shared<Attention>(c, gen, TensorParallelGroup{}, nullptr)),
        ln2_(std::make_shared<engine::LayerNorm>(c.width)),
        mlp_(make_moe_mlp(c, m, gen, ep, std::move(stats))) {
    register_all("moe");
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = engine::add(x, attn_->forward(ln1_->forward(x)));
    return engine::add(h, mlp_->forward(ln2_->forward(h)));
  }

 private:
  std::shared_ptr<engine::LayerNorm> ln1_;
  std::shared_ptr<Attention> attn_;
  std::shared_ptr<engine::LayerNorm> ln2_;
  std::shared_ptr<Module> mlp_;

  void register_all(const char* mlp) {
    register_module("ln1", ln1_);
    register_module("attn", attn_);
    register_module("ln2", ln2_);
    register_module(mlp, mlp_);
  }
};

// Final layer norm and the logits: (N, T, width) -> (N * T, vocab).
class Head final : public Module {
 public:
  Head(const GptConfig& c, Generator& gen)
      : ln_(std::make_shared<engine::LayerNorm>(c.width)), out_(std::make_shared<Linear>(c.width, c.vocab, gen)) {
    register_module("ln", ln_);
    register_module("out", out_);
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = ln_->forward(x);
    return out_->forward(engine::reshape(h, {h.size(0) * h.size(1), h.size(2)}));
  }

 private:
  std::shared_ptr<engine::LayerNorm> ln_;
  std::shared_ptr<Linear> out_;
};

std::string block_name(int64_t i) { return "block" + std::to_string(i); }

}  // namespace

std::shared_ptr<engine::Model> make_gpt(const GptConfig& c, Generator& gen, const TensorParallelGroup& g,
                                        engine::AttentionRing* ring) {
  if (g.size < 1 || g.rank < 0 || g.rank >= g.size || (g.size > 1 && !g.reducer))
    throw std::invalid_argument("gpt: a tensor-parallel group needs 0 <= rank < size and, for size > 1, a reducer");
  if (ring && g.size > 1)
    throw std::invalid_argument("gpt: context parallelism (a ring) with tensor parallelism is not built");
  if (c.heads % g.size != 0 || c.width % c.heads != 0)
    throw std::invalid_argument("gpt: " + std::to_string(c.heads) + " heads of width " + std::to_string(c.width) +
                                " do not split over " + std::to_string(g.size) +
                                " tensor-parallel ranks (the ranks must divide the heads, the heads the width)");
  auto m = std::make_shared<engine::Model>();
  if (g.sequence_parallel && c.context % g.size != 0)
    throw std::invalid_argument("gpt: sequence parallelism over " + std::to_string(g.size) +
                                " ranks needs them to divide the context of " + std::to_string(c.context));
  m->add_stage("embed", std::make_shared<Embed>(c, gen, g, ring));
  for (int64_t i = 0; i < c.layers; ++i) m->add_stage(block_name(i), std::make_shared<Block>(c, gen, g, ring));
  m->add_stage("head", std::make_shared<Head>(c, gen));
  return m;
}

std::vector<int64_t> context_parallel_positions(int64_t context, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw std::invalid_argument("context parallel: rank " + std::to_string(rank) + " is not in 0.." +
                                std::to_string(ranks - 1));
  const int64_t chunks = 2 * static_cast<int64_t>(ranks);
  if (context % chunks != 0)
    throw std::invalid_argument("context parallel: " + std::to_string(ranks) + " ranks cut the context of " +
                                std::to_string(context) + " into " + std::to_string(chunks) +
                                " chunks (2 x ranks), which must divide it");
  const int64_t chunk = context / chunks;
  std::vector<int64_t> out;
  for (int64_t c : {static_cast<int64_t>(rank), chunks - 1 - rank})
    for (int64_t p = c * chunk; p < (c + 1) * chunk; ++p) out.push_back(p);
  return out;
}

std::shared_ptr<engine::Model> make_gpt_moe(const GptConfig& c, const MoeConfig& m, Generator& gen,
                                            const ExpertGroup& ep, std::shared_ptr<MoeStats> stats) {
  check_moe_config(m, ep.exchanger ? ep.exchanger->size() : 1);
  if (c.width % c.heads != 0)
    throw std::invalid_argument("gpt-moe: " + std::to_string(c.heads) + " heads do not divide the width " +
                                std::to_string(c.width));
  auto model = std::make_shared<engine::Model>();
  model->add_stage("embed", std::make_shared<Embed>(c, gen, TensorParallelGroup{}, nullptr));
  for (int64_t i = 0; i < c.layers; ++i)
    model->add_stage(block_name(i), is_moe_block(m, i) ? std::make_shared<Block>(c, m, gen, ep, stats)
                                                       : std::make_shared<Block>(c, gen, TensorParallelGroup{}, nullptr));
  model->add_stage("head", std::make_shared<Head>(c, gen));
  return model;
}

std::vector<std::pair<std::string, TensorSplit>> gpt_tensor_parallel_plan(const GptConfig& c) {
  using S = TensorSplit;
  std::vector<std::pair<std::string, S>> plan{{"embed.token.weight", S::whole}, {"embed.position.weight", S::whole}};
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string b = block_name(i) + ".";
    for (const auto& [name, split] : std::vector<std::pair<std::string, S>>{
             {"ln1.weight", S::whole},      {"ln1.bias", S::whole},      {"attn.query.weight", S::rows},
             {"attn.query.bias", S::rows},  {"attn.key.weight", S::rows}, {"attn.key.bias", S::rows},
             {"attn.value.weight", S::rows}, {"attn.value.bias", S::rows}, {"attn.out.weight", S::columns},
             {"attn.out.bias", S::first_rank}, {"ln2.weight", S::whole}, {"ln2.bias", S::whole},
             {"mlp.up.weight", S::rows},    {"mlp.up.bias", S::rows},    {"mlp.down.weight", S::columns},
             {"mlp.down.bias", S::first_rank}})
      plan.emplace_back(b + name, split);
  }
  for (const char* name : {"head.ln.weight", "head.ln.bias", "head.out.weight", "head.out.bias"})
    plan.emplace_back(name, S::whole);
  return plan;
}

}  // namespace quartet::workloads

#include "workloads/moe.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/autograd.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "workloads/gpt.h"

namespace quartet::workloads {
namespace {

using engine::Generator;
using engine::Linear;
using engine::Module;
using engine::Tensor;

// One expert: gpt-mini's MLP, width -> 4 width -> GELU -> width, on (rows, width).
class Expert final : public Module {
 public:
  Expert(int64_t width, Generator& gen)
      : up_(std::make_shared<Linear>(width, 4 * width, gen)), down_(std::make_shared<Linear>(4 * width, width, gen)) {
    register_module("up", up_);
    register_module("down", down_);
  }
  Tensor forward(const Tensor& x) override { return down_->forward(engine::gelu(up_->forward(x))); }

 private:
  std::shared_ptr<Linear> up_, down_;
};

// Holds the experts by their global number, as PyTorch's ModuleList names them.
class Experts final : public Module {
 public:
  void add(int64_t number, std::shared_ptr<Expert> e) {
    register_module(std::to_string(number), e);
    list_.push_back(std::move(e));
  }
  Expert& local(int64_t i) { return *list_[static_cast<size_t>(i)]; }
  Tensor forward(const Tensor&) override { throw std::logic_error("experts: run one expert at a time"); }

 private:
  std::vector<std::shared_ptr<Expert>> list_;
};

// Where each choice of a forward pass goes: order lists the token rows in dispatch order
// (expert by expert, each expert's in priority order); slots[r k + c] is choice (r, c)'s
// place in that order or -1 (dropped); count[e] the rows expert e takes.
struct Routing {
  std::vector<int32_t> order, slots;
  std::vector<int64_t> count;
  int64_t dropped = 0;
};

Routing route(const std::vector<int32_t>& experts, int64_t rows, int64_t k, int64_t e, int64_t capacity) {
  Routing out;
  out.count.assign(static_cast<size_t>(e), 0);
  std::vector<int64_t> position(experts.size(), -1);
  // First choices before second ones, each in token order (Switch, GShard).
  for (int64_t c = 0; c < k; ++c)
    for (int64_t r = 0; r < rows; ++r) {
      const size_t i = static_cast<size_t>(r * k + c);
      int64_t& n = out.count[static_cast<size_t>(experts[i])];
      if (n < capacity) position[i] = n++;
      else ++out.dropped;
    }
  std::vector<int64_t> offset(static_cast<size_t>(e) + 1, 0);
  for (int64_t j = 0; j < e; ++j) offset[static_cast<size_t>(j) + 1] = offset[static_cast<size_t>(j)] + out.count[static_cast<size_t>(j)];
  out.order.assign(static_cast<size_t>(offset.back()), 0);
  out.slots.assign(experts.size(), -1);
  for (size_t i = 0; i < experts.size(); ++i) {
    if (position[i] < 0) continue;
    const int64_t slot = offset[static_cast<size_t>(experts[i])] + position[i];
    out.slots[i] = static_cast<int32_t>(slot);
    out.order[static_cast<size_t>(slot)] = static_cast<int32_t>(static_cast<int64_t>(i) / k);
  }
  return out;
}

class MoeMlp final : public Module {
 public:
  MoeMlp(const GptConfig& g, const MoeConfig& m, Generator& gen, const ExpertGroup& group,
         std::shared_ptr<MoeStats> stats)
      : config_(m), group_(group), stats_(std::move(stats)), experts_(std::make_shared<Experts>()) {
    const int size = group.exchanger ? group.exchanger->size() : 1;
    const int rank = group.exchanger ? group.exchanger->rank() : 0;
    local_ = m.experts / size;
    first_ = rank * local_;
    router_ = std::make_shared<Linear>(g.width, m.experts, gen, false);
    register_module("router", router_);
    // Every process draws every expert's initial weights, so a group's experts are the
    // ones a single process would hold, and keeps its own.
    for (int64_t e = 0; e < m.experts; ++e) {
      auto expert = std::make_shared<Expert>(g.width, gen);
      if (e >= first_ && e < first_ + local_) experts_->add(e, expert);
    }
    register_module("experts", experts_);
  }

  Tensor forward(const Tensor& input) override {
    const engine::Shape& shape = input.shape();
    const int64_t rows = shape[0] * shape[1], width = shape[2], e = config_.experts, k = config_.top_k;
    const Tensor x = engine::reshape(input, {rows, width});
    const Tensor logits = router_->forward(x);
    const Tensor probs = engine::softmax(logits);
    const engine::TopKGates top = engine::top_k_gates(probs, k, k > 1);
    const int64_t capacity =
        config_.capacity_factor > 0.0
            ? static_cast<int64_t>(std::ceil(config_.capacity_factor * static_cast<double>(rows * k) / static_cast<double>(e)))
            : rows;
    const Routing routing = route(top.experts, rows, k, e, capacity);
    if (stats_) {
      stats_->choices += rows * k;
      stats_->dropped += routing.dropped;
      stats_->load.resize(static_cast<size_t>(e), 0);
      for (int64_t j = 0; j < e; ++j) stats_->load[static_cast<size_t>(j)] += routing.count[static_cast<size_t>(j)];
    }
    const Tensor expert_out = run_experts(x, routing);
    Tensor y = engine::combine_rows(expert_out, top.gates, routing.slots);
    if (config_.aux_loss > 0.0 && engine::grad_enabled() && probs.requires_grad())
      y = engine::add_side_loss(y, balance_loss(probs, top.experts, rows));
    if (config_.z_loss > 0.0 && engine::grad_enabled() && logits.requires_grad()) {
      const Tensor lse = engine::logsumexp(logits);
      y = engine::add_side_loss(y, engine::scale(engine::mean(engine::mul(lse, lse)), static_cast<float>(config_.z_loss)));
    }
    for (const Tensor& idle : idle_) y = engine::add_side_loss(y, idle);
    idle_.clear();
    return engine::reshape(y, shape);
  }

 private:
  // The rows of every expert's output in dispatch order, (sum of counts, width). With a
  // group: the rows for other ranks' experts go there by all-to-all (rank q sends rank p
  // its rows for p's experts, expert by expert), this rank's experts run on what arrives
  // (from rank 0's rows to rank N-1's, for each expert), and the outputs go back.
  Tensor run_experts(const Tensor& x, const Routing& routing) {
    const int64_t width = x.size(1);
    engine::RowExchanger* ex = group_.exchanger;
    const int n = ex ? ex->size() : 1;
    Tensor here;
    if (!routing.order.empty()) {
      here = engine::gather_rows(x, routing.order);
    } else {
      // Nothing to dispatch: an empty leaf, so backward still reaches the all-to-alls
      // every rank of the group runs in step.
      here = Tensor::empty({0, width}, x.device());
      here.set_requires_grad(x.requires_grad() && engine::grad_enabled());
    }
    // counts[q * local + j]: the rows rank q sends this rank's expert j.
    std::vector<int64_t> counts(routing.count.begin() + first_, routing.count.begin() + first_ + local_);
    std::vector<int64_t> send_rows(static_cast<size_t>(n), 0), recv_rows(static_cast<size_t>(n), 0);
    if (ex) {
      std::vector<float> mine(routing.count.begin(), routing.count.end()), theirs(static_cast<size_t>(n * local_));
      ex->all_to_all(mine, std::vector<int64_t>(static_cast<size_t>(n), local_), theirs,
                     std::vector<int64_t>(static_cast<size_t>(n), local_));
      counts.assign(theirs.begin(), theirs.end());
      for (int p = 0; p < n; ++p)
        for (int64_t j = 0; j < local_; ++j) {
          send_rows[static_cast<size_t>(p)] += routing.count[static_cast<size_t>(p * local_ + j)];
          recv_rows[static_cast<size_t>(p)] += counts[static_cast<size_t>(p * local_ + j)];
        }
      here = engine::all_to_all_rows(here, send_rows, recv_rows, *ex);
    }
    // Where rank q's rows for expert j start in `here`.
    std::vector<int64_t> start(counts.size(), 0);
    for (size_t i = 1; i < counts.size(); ++i) start[i] = start[i - 1] + counts[i - 1];
    std::vector<Tensor> outs;
    std::vector<int32_t> back(static_cast<size_t>(here.size(0)));  // row of `here` -> row of the outputs
    int64_t done = 0;
    for (int64_t j = 0; j < local_; ++j) {
      std::vector<int32_t> rows;
      for (int q = 0; q < n; ++q) {
        const size_t c = static_cast<size_t>(q * local_ + j);
        for (int64_t i = 0; i < counts[c]; ++i) {
          back[static_cast<size_t>(start[c] + i)] = static_cast<int32_t>(done + static_cast<int64_t>(rows.size()));
          rows.push_back(static_cast<int32_t>(start[c] + i));
        }
      }
      if (!rows.empty()) {
        outs.push_back(experts_->local(j).forward(engine::gather_rows(here, rows)));
      } else if (engine::grad_enabled() && x.requires_grad()) {
        // An expert with no tokens still gets a (zero) gradient, as every parameter does,
        // from a side loss of 0 x its output on one row.
        idle_.push_back(engine::scale(engine::sum(experts_->local(j).forward(engine::gather_rows(x, {0}))), 0.0f));
      }
      done += static_cast<int64_t>(rows.size());
    }
    // No rows arrived: the empty rows go back as they came, still in the graph, so the
    // two all-to-alls' backward runs in the same order on every rank.
    if (outs.empty()) return ex ? engine::all_to_all_rows(here, recv_rows, send_rows, *ex) : here;
    Tensor out = outs.size() == 1 ? outs.front() : engine::concat(outs, 0);
    if (!ex) return out;
    return engine::all_to_all_rows(engine::gather_rows(out, back), recv_rows, send_rows, *ex);
  }

  // alpha E sum_i f_i P_i = sum over (r, i) of probs[r, i] * alpha E f_i / R: f_i counts
  // first choices (a constant), P_i is the mean of column i.
  Tensor balance_loss(const Tensor& probs, const std::vector<int32_t>& experts, int64_t rows) const {
    const int64_t e = config_.experts, k = config_.top_k;
    std::vector<double> f(static_cast<size_t>(e), 0.0);
    for (int64_t r = 0; r < rows; ++r) f[static_cast<size_t>(experts[static_cast<size_t>(r * k)])] += 1.0 / static_cast<double>(rows);
    std::vector<float> weight(static_cast<size_t>(rows * e));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < e; ++i)
        weight[static_cast<size_t>(r * e + i)] =
            static_cast<float>(config_.aux_loss * static_cast<double>(e) * f[static_cast<size_t>(i)] / static_cast<double>(rows));
    return engine::sum(engine::mul(probs, Tensor::from_vector({rows, e}, weight).to(probs.device())));
  }

  MoeConfig config_;
  ExpertGroup group_;
  std::shared_ptr<MoeStats> stats_;
  std::shared_ptr<Linear> router_;
  std::shared_ptr<Experts> experts_;
  int64_t local_ = 0, first_ = 0;
  std::vector<Tensor> idle_;  // side losses that give idle experts their gradient
};

}  // namespace

bool is_moe_block(const MoeConfig& moe, int64_t block) { return block % moe.every == moe.every - 1; }

void check_moe_config(const MoeConfig& m, int group_size) {
  if (m.experts < 1) throw std::invalid_argument("gpt-moe: experts must be >= 1, got " + std::to_string(m.experts));
  if (m.top_k < 1 || m.top_k > 2 || m.top_k > m.experts)
    throw std::invalid_argument("gpt-moe: top_k must be 1 (Switch) or 2 (GShard) and at most the experts (" +
                                std::to_string(m.experts) + "), got " + std::to_string(m.top_k));
  if (!(m.capacity_factor >= 0.0) || !std::isfinite(m.capacity_factor))
    throw std::invalid_argument("gpt-moe: capacity_factor must be >= 0 (0: no limit), got " +
                                std::to_string(m.capacity_factor));
  if (m.every < 1) throw std::invalid_argument("gpt-moe: every must be >= 1, got " + std::to_string(m.every));
  if (!(m.aux_loss >= 0.0) || !std::isfinite(m.aux_loss))
    throw std::invalid_argument("gpt-moe: aux_loss must be >= 0, got " + std::to_string(m.aux_loss));
  if (!(m.z_loss >= 0.0) || !std::isfinite(m.z_loss))
    throw std::invalid_argument("gpt-moe: z_loss must be >= 0, got " + std::to_string(m.z_loss));
  if (group_size < 1 || m.experts % group_size != 0)
    throw std::invalid_argument("gpt-moe: " + std::to_string(group_size) + " expert-parallel ranks do not divide " +
                                std::to_string(m.experts) + " experts (ep must divide the experts)");
}

std::shared_ptr<engine::Module> make_moe_mlp(const GptConfig& gpt, const MoeConfig& moe, Generator& gen,
                                             const ExpertGroup& group, std::shared_ptr<MoeStats> stats) {
  check_moe_config(moe, group.exchanger ? group.exchanger->size() : 1);
  return std::make_shared<MoeMlp>(gpt, moe, gen, group, std::move(stats));
}

}  // namespace quartet::workloads

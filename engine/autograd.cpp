#include "engine/autograd.h"

#include <stdexcept>
#include <string>
#include <unordered_map>

#include "engine/cpu/elementwise.h"
#include "engine/dispatch.h"

namespace quartet::engine {
namespace {

thread_local bool t_grad_enabled = true;
thread_local float t_side_loss_weight = 1.0f;

// acc += g, allocating acc (tagged `tag`) on first use. A first gradient that nothing
// else references becomes acc itself, saving a parameter-sized copy.
void accumulate(std::shared_ptr<TensorImpl>& acc, const Tensor& g, MemTag tag) {
  if (!acc && g.impl_ptr().use_count() == 1 && g.impl()->storage.use_count() == 1 && !g.impl()->grad_fn) {
    g.impl()->storage->set_tag(tag);
    g.impl()->requires_grad = false;
    acc = g.impl_ptr();
    return;
  }
  if (!acc) {
    Tensor fresh = Tensor::empty(g.shape(), g.device(), tag);
    QUARTET_DISPATCH(g.device(), copy, g, fresh);
    acc = fresh.impl_ptr();
    return;
  }
  Tensor a(acc);
  QUARTET_DISPATCH(g.device(), add_, a, g, 1.0f);
}

}  // namespace

bool grad_enabled() { return t_grad_enabled; }

float side_loss_weight() { return t_side_loss_weight; }
SideLossWeightScope::SideLossWeightScope(float weight) : saved_(t_side_loss_weight) { t_side_loss_weight = weight; }
SideLossWeightScope::~SideLossWeightScope() { t_side_loss_weight = saved_; }

NoGradScope::NoGradScope() : saved_(t_grad_enabled) { t_grad_enabled = false; }
NoGradScope::~NoGradScope() { t_grad_enabled = saved_; }

EnableGradScope::EnableGradScope() : saved_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradScope::~EnableGradScope() { t_grad_enabled = saved_; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

void record(Tensor& output, const char* name, TensorList inputs, Node::BackwardFn backward) {
  if (!t_grad_enabled) return;
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  if (!any) return;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->next.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (!in.defined() || !in.requires_grad()) continue;
    Edge& e = node->next[i];
    if (in.grad_fn()) e.fn = in.grad_fn();
    else e.leaf = in.impl_ptr();
    e.shape = in.shape();
    e.device = in.device();
  }
  node->backward = std::move(backward);
  output.impl()->grad_fn = std::move(node);
  output.impl()->requires_grad = true;
}

namespace {

// A vertex of the backward graph: an op's node, or a leaf that receives a gradient.
// Both are keyed by their address.
struct Vertex {
  std::shared_ptr<Node> fn;
  std::shared_ptr<TensorImpl> leaf;
  const void* key() const { return fn ? static_cast<const void*>(fn.get()) : leaf.get(); }
};

Vertex vertex_of(const Edge& e) { return {e.fn, e.leaf}; }

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad) { run_backward(TensorList{root}, TensorList{grad}); }

void run_backward(const TensorList& roots, const TensorList& grads_in) {
  if (roots.size() != grads_in.size())
    throw std::invalid_argument("backward: " + std::to_string(roots.size()) + " tensors but " +
                                std::to_string(grads_in.size()) + " gradients");
  if (roots.empty()) throw std::invalid_argument("backward: no tensor to start from");
  std::vector<Vertex> starts;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    check_same_shape(root, grads_in[i], "backward");
    if (!root.requires_grad())
      throw std::logic_error("backward: the tensor does not require grad (no parameter reaches it)");
    starts.push_back(root.grad_fn() ? Vertex{root.grad_fn(), nullptr} : Vertex{nullptr, root.impl_ptr()});
  }

  // Count, for every vertex, how many recorded uses still owe it a gradient. A root may
  // also feed another root (a skip tensor beside the main path): it waits for that use.
  std::unordered_map<const void*, int> pending;
  std::vector<Node*> stack;
  for (const Vertex& start : starts) {
    auto [it, fresh] = pending.try_emplace(start.key(), 0);
    if (fresh && start.fn) stack.push_back(start.fn.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.fn && !e.leaf) continue;
      const Vertex v = vertex_of(e);
      auto [it, fresh] = pending.try_emplace(v.key(), 0);
      ++it->second;
      if (fresh && e.fn) stack.push_back(e.fn.get());
    }
  }

  // Kahn's order: a vertex is processed once every consumer has delivered its part.
  std::unordered_map<const void*, std::shared_ptr<TensorImpl>> grads;
  std::vector<Vertex> ready;
  for (size_t i = 0; i < starts.size(); ++i) {
    auto& slot = grads[starts[i].key()];
    if (!slot) {
      slot = grads_in[i].impl_ptr();
      if (pending[starts[i].key()] == 0) ready.push_back(starts[i]);
    } else {  // the same tensor twice: its seeds add up
      Tensor sum = Tensor::empty(grads_in[i].shape(), grads_in[i].device(), MemTag::workspace);
      QUARTET_DISPATCH(sum.device(), copy, Tensor(slot), sum);
      QUARTET_DISPATCH(sum.device(), add_, sum, grads_in[i], 1.0f);
      slot = sum.impl_ptr();
    }
  }
  MemTagScope tag(MemTag::workspace);
  while (!ready.empty()) {
    const Vertex v = std::move(ready.back());
    ready.pop_back();
    auto found = grads.find(v.key());
    Tensor g(found->second);
    grads.erase(found);

    if (v.leaf) {  // a leaf: its gradient is final for this pass
      accumulate(v.leaf->grad, g, v.leaf->grad_tag);
      Tensor leaf(v.leaf);
      for (const GradReadyHook& hook : v.leaf->hooks) hook(leaf);
      continue;
    }
    Node& node = *v.fn;
    if (!node.backward)
      throw std::logic_error(std::string("autograd: backward through op ") + node.name +
                             " a second time; its saved tensors were freed by the first backward "
                             "(run forward again)");
    TensorList in_grads = node.backward(g);
    node.backward = nullptr;  // frees what the op saved for this backward
    g = Tensor();
    if (in_grads.size() != node.next.size())
      throw std::logic_error(std::string("autograd: op ") + node.name + " returned " +
                             std::to_string(in_grads.size()) + " gradients for " +
                             std::to_string(node.next.size()) + " inputs");
    for (size_t i = 0; i < in_grads.size(); ++i) {
      const Edge& e = node.next[i];
      if (!e.fn && !e.leaf) continue;
      const Vertex in = vertex_of(e);
      if (in_grads[i].defined()) {
        if (in_grads[i].shape() != e.shape)
          throw std::invalid_argument(std::string(node.name) + ": gradient shape " +
                                      shape_str(in_grads[i].shape()) + " differs from input shape " +
                                      shape_str(e.shape));
        auto& slot = grads[in.key()];
        if (!slot) {
          slot = in_grads[i].impl_ptr();
        } else {
          // A gradient an op handed back may alias something it saved: sum into a copy.
          if (slot.use_count() > 1) {
            Tensor copy = Tensor(slot).clone();
            slot = copy.impl_ptr();
          }
          Tensor acc(slot);
          QUARTET_DISPATCH(acc.device(), add_, acc, in_grads[i], 1.0f);
        }
      }
      if (--pending[in.key()] == 0) {
        if (!grads.count(in.key())) {  // every use gave "no gradient": a zero one
          grads[in.key()] = Tensor::zeros(e.shape, e.device).impl_ptr();
        }
        ready.push_back(in);
      }
    }
  }
}

namespace {

// What a checkpointed segment keeps between forward and backward: its inputs, how to
// recompute it, and the gradients of its outputs as backward delivers them.
struct CheckpointState {
  SegmentFn recompute;
  TensorList inputs;
  size_t num_outputs = 0;
  TensorList output_grads;  // per output; undefined where backward brought none
};

Edge edge_to(const Tensor& t) {
  Edge e;
  if (!t.defined() || !t.requires_grad()) return e;
  if (t.grad_fn()) e.fn = t.grad_fn();
  else e.leaf = t.impl_ptr();
  e.shape = t.shape();
  e.device = t.device();
  return e;
}

// The checkpoint op's backward: recompute with the graph, backpropagate the outputs'
// gradients through it, hand back the inputs' gradients.
TensorList checkpoint_backward(CheckpointState& st) {
  TensorList leaves;
  for (const Tensor& in : st.inputs) {
    Tensor d = in.detach();
    if (in.requires_grad()) d.set_requires_grad(true);
    d.impl()->grad_tag = MemTag::workspace;  // a gradient in flight, not a parameter's
    leaves.push_back(d);
  }
  TensorList ys;
  {
    EnableGradScope grad_on;
    MemTagScope tag(MemTag::activations);
    ys = st.recompute(leaves);
  }
  if (ys.size() != st.num_outputs)
    throw std::logic_error("checkpoint: the recompute returned " + std::to_string(ys.size()) +
                           " tensors, the forward " + std::to_string(st.num_outputs));
  TensorList roots, grads;
  for (size_t j = 0; j < ys.size(); ++j) {
    Tensor& g = st.output_grads[j];
    if (!g.defined()) continue;
    check_same_shape(ys[j], g, "checkpoint: recomputed output against its gradient");
    if (!ys[j].requires_grad()) continue;  // depends on nothing trainable after all
    roots.push_back(ys[j]);
    grads.push_back(g);
  }
  st.output_grads.clear();
  ys.clear();
  if (!roots.empty()) run_backward(roots, grads);
  roots.clear();
  grads.clear();
  TensorList out;
  for (Tensor& leaf : leaves) out.push_back(leaf.requires_grad() ? leaf.grad() : Tensor());
  return out;
}

}  // namespace

TensorList checkpoint(const SegmentFn& forward, SegmentFn recompute, const TensorList& inputs,
                      const TensorList& params) {
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  for (const Tensor& t : params) any = any || (t.defined() && t.requires_grad());
  if (!t_grad_enabled || !any) return forward(inputs);

  TensorList outs;
  {
    NoGradScope no_grad;
    outs = forward(inputs);
  }
  auto state = std::make_shared<CheckpointState>();
  state->recompute = std::move(recompute);
  state->inputs = inputs;
  state->num_outputs = outs.size();
  state->output_grads.resize(outs.size());

  // One node stands for the whole segment; each output gets a node of its own that parks
  // its gradient in the state and passes a one-float token on to that node, so the
  // segment's backward runs once, after every output it reaches has been handed its
  // gradient (run_backward's order guarantees that).
  auto segment = std::make_shared<Node>();
  segment->name = "checkpoint";
  for (const Tensor& in : inputs) segment->next.push_back(edge_to(in));
  segment->backward = [state](const Tensor&) { return checkpoint_backward(*state); };

  const Device device = inputs.empty() ? Device::cpu() : inputs.front().device();
  TensorList result;
  for (size_t j = 0; j < outs.size(); ++j) {
    bool passed_through = false;
    for (const Tensor& in : inputs) passed_through = passed_through || outs[j].same(in);
    if (passed_through) {
      result.push_back(outs[j]);
      continue;
    }
    Tensor y = outs[j].detach();  // a fresh handle: the same tensor twice gets two nodes
    auto node = std::make_shared<Node>();
    node->name = "checkpoint_output";
    Edge token;
    token.fn = segment;
    token.shape = {1};
    token.device = device;
    node->next.push_back(std::move(token));
    node->backward = [state, j, device](const Tensor& g) {
      state->output_grads[j] = g;
      return TensorList{Tensor::zeros({1}, device)};
    };
    y.impl()->grad_fn = std::move(node);
    y.impl()->requires_grad = true;
    result.push_back(std::move(y));
  }
  return result;
}

TensorList grads_or_zeros(const TensorList& leaves) {
  TensorList out;
  for (const Tensor& l : leaves) out.push_back(l.grad().defined() ? l.grad() : Tensor::zeros(l.shape(), l.device()));
  return out;
}

}  // namespace quartet::engine

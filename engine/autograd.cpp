#include "engine/autograd.h"

#include <stdexcept>
#include <string>
#include <unordered_map>

#include "engine/cpu/elementwise.h"
#include "engine/dispatch.h"

namespace quartet::engine {
namespace {

thread_local bool t_grad_enabled = true;

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

NoGradScope::NoGradScope() : saved_(t_grad_enabled) { t_grad_enabled = false; }
NoGradScope::~NoGradScope() { t_grad_enabled = saved_; }

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
      accumulate(v.leaf->grad, g, MemTag::gradients);
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

}  // namespace quartet::engine

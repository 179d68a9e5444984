#include "engine/autograd.h"

#include <stdexcept>
#include <string>
#include <unordered_map>

#include "engine/cpu/elementwise.h"
#include "engine/dispatch.h"

namespace quartet::engine {
namespace {

thread_local bool t_grad_enabled = true;

// acc += g, allocating acc (tagged `tag`) on first use.
void accumulate(std::shared_ptr<TensorImpl>& acc, const Tensor& g, MemTag tag) {
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
  node->inputs = std::move(inputs);
  node->backward = std::move(backward);
  output.impl()->grad_fn = std::move(node);
  output.impl()->requires_grad = true;
}

void run_backward(const Tensor& root, const Tensor& grad) {
  check_same_shape(root, grad, "backward");
  if (!root.requires_grad())
    throw std::logic_error("backward: the tensor does not require grad (no parameter reaches it)");

  // Count, for every tensor in the graph, how many recorded uses still owe it a gradient.
  std::unordered_map<TensorImpl*, int> pending;
  std::vector<TensorImpl*> stack{root.impl()};
  pending[root.impl()] = 0;
  while (!stack.empty()) {
    TensorImpl* t = stack.back();
    stack.pop_back();
    if (!t->grad_fn) continue;
    for (const Tensor& in : t->grad_fn->inputs) {
      if (!in.defined() || !in.requires_grad()) continue;
      auto [it, fresh] = pending.try_emplace(in.impl(), 0);
      ++it->second;
      if (fresh) stack.push_back(in.impl());
    }
  }

  // Kahn's order: a tensor is processed once every consumer has delivered its part.
  std::unordered_map<TensorImpl*, std::shared_ptr<TensorImpl>> grads;
  grads[root.impl()] = grad.impl_ptr();
  std::vector<std::shared_ptr<TensorImpl>> ready{root.impl_ptr()};
  MemTagScope tag(MemTag::workspace);
  while (!ready.empty()) {
    std::shared_ptr<TensorImpl> t = std::move(ready.back());
    ready.pop_back();
    auto found = grads.find(t.get());
    Tensor g(found->second);
    grads.erase(found);

    if (!t->grad_fn) {  // a leaf: its gradient is final for this pass
      accumulate(t->grad, g, MemTag::gradients);
      Tensor leaf(t);
      for (const GradReadyHook& hook : t->hooks) hook(leaf);
      continue;
    }
    std::shared_ptr<Node> node = t->grad_fn;
    TensorList in_grads = node->backward(g);
    g = Tensor();
    if (in_grads.size() != node->inputs.size())
      throw std::logic_error(std::string("autograd: op ") + node->name + " returned " +
                             std::to_string(in_grads.size()) + " gradients for " +
                             std::to_string(node->inputs.size()) + " inputs");
    for (size_t i = 0; i < in_grads.size(); ++i) {
      const Tensor& in = node->inputs[i];
      if (!in.defined() || !in.requires_grad()) continue;
      if (in_grads[i].defined()) {
        check_same_shape(in, in_grads[i], node->name);
        auto& slot = grads[in.impl()];
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
      if (--pending[in.impl()] == 0) {
        if (!grads.count(in.impl())) {  // every use gave "no gradient": a zero one
          grads[in.impl()] = Tensor::zeros(in.shape(), in.device()).impl_ptr();
        }
        ready.push_back(in.impl_ptr());
      }
    }
  }
}

}  // namespace quartet::engine

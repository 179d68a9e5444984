#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "engine/tensor.h"

namespace quartet::engine {

// Where the gradient for one input of a recorded op goes: the node that produced the
// input, or the input itself when it is a leaf, or nowhere (neither set) when the input
// needs no gradient. Edges do not own the inputs' storage, so a tensor that no backward
// saved is freed as soon as forward drops it, as in PyTorch.
struct Node;
struct Edge {
  std::shared_ptr<Node> fn;           // the input's grad_fn, for an input an op produced
  std::shared_ptr<TensorImpl> leaf;   // the input, for a leaf that requires grad
  Shape shape;                        // the input's shape, to check the gradient
  Device device;
};

// One recorded op: given the gradient of its output, returns one gradient per input
// (undefined where an input needs none). Backward closures capture what they saved;
// run_backward releases a closure once it has run, which frees those saved tensors.
struct Node {
  using BackwardFn = std::function<TensorList(const Tensor& grad_output)>;
  const char* name = "";
  std::vector<Edge> next;  // one per input, in the op's input order
  BackwardFn backward;
};

// Whether ops record the graph on this thread.
bool grad_enabled();

class NoGradScope {
 public:
  NoGradScope();
  ~NoGradScope();
  NoGradScope(const NoGradScope&) = delete;
  NoGradScope& operator=(const NoGradScope&) = delete;

 private:
  bool saved_;
};

// True when grad mode is on and some input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

// Makes `output` depend on `inputs` through `backward` when needs_grad(inputs).
// ensures: backward returns inputs.size() tensors, each undefined or shaped as its input.
void record(Tensor& output, const char* name, TensorList inputs, Node::BackwardFn backward);

// Runs backward from `root` seeded with `grad` (same shape). Leaves accumulate into
// grad() with +=; each leaf's grad-ready hooks fire as soon as all of its contributions
// in this pass have been added. Intermediate gradients are freed as they are consumed,
// and each op's saved tensors as soon as its backward has run (PyTorch's default,
// retain_graph=False): a second backward through the same graph throws
// std::logic_error; run forward again instead.
void run_backward(const Tensor& root, const Tensor& grad);
// Backward from several tensors at once, each seeded with its gradient: what the lower
// half of a model cut in two runs when the gradients at the cut (main path and skip
// tensors) come back. A root that also feeds another root gets both contributions.
// requires roots.size() == grads.size() >= 1, grads[i] shaped like roots[i]
void run_backward(const TensorList& roots, const TensorList& grads);

}  // namespace quartet::engine

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

// Turns grad mode on for a scope, whatever it was (activation checkpointing records its
// recompute inside a backward pass).
class EnableGradScope {
 public:
  EnableGradScope();
  ~EnableGradScope();
  EnableGradScope(const EnableGradScope&) = delete;
  EnableGradScope& operator=(const EnableGradScope&) = delete;

 private:
  bool saved_;
};

// The weight a backward on this thread gives the main loss (1 unless a scope sets it):
// a trainer that scales each micro-batch's loss by 1/k sets 1/k around its backward, and
// add_side_loss (engine/ops.h) gives the side losses of that forward the same weight.
float side_loss_weight();
class SideLossWeightScope {
 public:
  explicit SideLossWeightScope(float weight);
  ~SideLossWeightScope();
  SideLossWeightScope(const SideLossWeightScope&) = delete;
  SideLossWeightScope& operator=(const SideLossWeightScope&) = delete;

 private:
  float saved_;
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

// The gradients of `leaves` after a backward, zeros (on the leaf's device) for a leaf that
// got none: what a cut model sends back for the tensors that crossed its cut.
TensorList grads_or_zeros(const TensorList& leaves);

// ---- activation checkpointing (Chen et al. 2016; PyTorch's torch.utils.checkpoint) ----

// A segment of a network: a list of tensors in, a list of tensors out (a model stage).
using SegmentFn = std::function<TensorList(const TensorList& inputs)>;

// Trades compute for memory. Runs forward(inputs) without recording a graph, so the
// segment's intermediate tensors are freed as it goes and only its inputs are kept (with
// its outputs, which the caller holds). The outputs are recorded as one op: once backward
// has delivered the gradients of every output it reaches, recompute(inputs) runs again
// with the graph recorded, on detached copies of the inputs, and backward runs through
// that graph. Leaves inside the segment (its parameters) get their gradients and fire
// their grad-ready hooks there, in that nested pass; the inputs' gradients flow on to
// whatever produced them.
// requires: recompute(inputs) returns what forward(inputs) returned (as many tensors, the
//   same shapes, and the same values for the gradients to be right); every output of the
//   segment that depends on a leaf requiring grad depends on one in `params` or on an
//   input; a parameter is used by one segment only (its hook fires once per segment).
// ensures: an output that is one of the inputs passed through unchanged is that input
//   itself, outside the checkpoint (its gradient skips the recompute); the others are new
//   tensors that require grad. Without grad mode, or when no input and no param requires
//   grad, this is forward(inputs) and records nothing.
TensorList checkpoint(const SegmentFn& forward, SegmentFn recompute, const TensorList& inputs,
                      const TensorList& params);

}  // namespace quartet::engine

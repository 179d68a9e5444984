#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "engine/tensor.h"

namespace quartet::engine {

// One recorded op: given the gradient of its output, returns one gradient per input
// (undefined where an input needs none). Backward closures capture what they saved.
struct Node {
  using BackwardFn = std::function<TensorList(const Tensor& grad_output)>;
  const char* name = "";
  TensorList inputs;
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
// in this pass have been added. Intermediate gradients are freed as they are consumed.
void run_backward(const Tensor& root, const Tensor& grad);

}  // namespace quartet::engine

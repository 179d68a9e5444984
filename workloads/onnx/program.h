#pragma once

// An ONNX graph compiled to a list of engine ops (the onnx library's ModelProto in,
// engine tensors out). Every node becomes one step that reads its inputs from numbered
// slots and writes its outputs to others; attributes are read once, here, so a forward
// pass costs the ops and a vector lookup per tensor. Values known when the graph is read
// (initializers that set shapes, Constant nodes, int64 tensors) are folded at import.
//
// Shape chains (fold.h): a value computed from a runtime tensor's shape depends on the
// batch size, which the regimes vary (micro-batches, shards, the last evaluation batch).
// So such values are not folded to numbers at import: the integer nodes that compute them
// (Shape, Gather, Unsqueeze, Concat, Div, ...) become host steps that write an integer
// value slot (Frame::ints) from the shapes at hand, a few microseconds per forward; the
// Reshape or Expand that reads one takes its target from there. Everything in such a
// chain that reads no runtime shape is still folded at import. The same code (fold.h)
// evaluates a node in both places, so a value is right for every batch size.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/random.h"
#include "engine/tensor.h"
#include "workloads/onnx/fold.h"

namespace onnx {
class ModelProto;
}

namespace quartet::workloads::onnx {

// The ops compiled, sorted: what a refusal lists.
const std::vector<std::string>& supported_ops();

// What a step sees: one tensor per slot, the mode and the generator of Dropout.
struct Frame {
  explicit Frame(int num_slots) : slots(num_slots), ints(num_slots), dying(num_slots, 0) {}
  std::vector<engine::Tensor> slots;
  // The integer values computed from runtime shapes, in slots of their own (Program::is_value_slot).
  std::vector<Known> ints;
  // Set while the step that reads a slot last runs: the step may take its tensor over
  // (relu in place); the slot is emptied after it, so activations are freed as soon as
  // the graph is done with them.
  std::vector<char> dying;
  bool training = false;
  engine::Generator* gen = nullptr;
  engine::Device device = engine::Device::cpu();  // where constants are put
  engine::StatsReducer* stats_reducer = nullptr;  // BatchNormalization's, SyncBatchNorm when set
};

// A float initializer that feeds a weight, bias or norm: trainable, or (running
// statistics) a buffer.
struct Initializer {
  std::string name;
  engine::Tensor value;
  bool buffer = false;
  int slot = -1;
  int first_step = -1, last_step = -1;  // the steps that read it
};

class Program {
 public:
  // Checks the model with the ONNX checker and compiles it. Throws std::invalid_argument
  // naming the node, its op and what is wrong (with the supported ops for an unknown op),
  // for anything this importer does not run.
  explicit Program(const ::onnx::ModelProto& model);

  struct Step {
    std::string node;  // the node's name, or its op and index when it has none
    std::string op;
    std::vector<int> reads, writes;  // runtime slots
    std::function<void(Frame&)> run;
  };
  const std::vector<Step>& steps() const { return steps_; }
  int num_slots() const { return static_cast<int>(slot_names_.size()); }
  const std::string& slot_name(int slot) const { return slot_names_[slot]; }
  // Whether a slot holds an integer value (Frame::ints) rather than a tensor.
  bool is_value_slot(int slot) const { return value_slots_.count(slot) > 0; }
  // The graph's runtime inputs (float tensors that are no initializer) and outputs.
  const std::vector<int>& inputs() const { return inputs_; }
  const std::vector<int>& outputs() const { return outputs_; }
  // Declared shapes of the inputs and outputs (-1 where a size is symbolic).
  const std::vector<engine::Shape>& input_shapes() const { return input_shapes_; }
  const std::vector<engine::Shape>& output_shapes() const { return output_shapes_; }
  const std::vector<Initializer>& initializers() const { return initializers_; }

  // Runs steps [begin, end) on a frame whose slots hold what they read.
  void run(Frame& frame, int begin, int end) const;
  // All of it: inputs in order, initializers at their import values; eval mode.
  std::vector<engine::Tensor> run(const std::vector<engine::Tensor>& inputs) const;

 private:
  friend struct Compiler;
  std::vector<Step> steps_;
  std::vector<std::vector<int>> frees_;  // per step: the slots it reads last
  std::vector<std::string> slot_names_;
  std::set<int> value_slots_;
  std::vector<int> inputs_, outputs_;
  std::vector<engine::Shape> input_shapes_, output_shapes_;
  std::vector<Initializer> initializers_;
};

// The ONNX input slots whose value must be known at import (a shape, pads, axes, scales,
// clip bounds): the conformance tests hand those in as initializers.
bool is_static_input(const std::string& op, int index);

}  // namespace quartet::workloads::onnx

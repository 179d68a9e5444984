#pragma once

// Values a graph computes on integers: shapes, indices, masks. PyTorch's exporter writes
// `x.reshape(b, t, 3, h, c // h)` as Shape, Gather, Div, Unsqueeze and Concat nodes
// ahead of the Reshape. These run on the host, on small vectors, never as engine ops:
// when every input is known at import the importer folds them there; when one reads a
// runtime tensor's shape (whose batch dim differs between regimes, micro-batches and
// shards) they run as steps of the program, once per forward, on the shapes at hand.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace onnx {
class NodeProto;
class TensorProto;
}  // namespace onnx

namespace quartet::workloads::onnx {

// A value of the graph held on the host: an initializer, a Constant's output, or what
// the ops below computed. dtype is ONNX's TensorProto data type; int64, int32 and bool
// values are held exactly (every integer up to 2^53).
struct Known {
  int32_t dtype = 0;
  engine::Shape dims;
  std::vector<double> values;
  std::vector<float> floats() const { return {values.begin(), values.end()}; }
  std::vector<int64_t> ints() const {
    std::vector<int64_t> out;
    for (double v : values) out.push_back(static_cast<int64_t>(v));
    return out;
  }
};

const char* dtype_name(int32_t dtype);

// A TensorProto's values (float32, float64, int64, int32 or bool). Throws
// std::invalid_argument starting with `where` for another dtype, data kept in an external
// file, or sizes that do not add up.
Known read_known(const ::onnx::TensorProto& t, const std::string& where);

// One ONNX node evaluated on host values: its inputs in, its first output out. Throws
// std::invalid_argument saying what does not fit (the caller names the node).
using Fold = std::function<Known(const std::vector<Known>&)>;

// The ops a Fold is made for.
bool is_foldable(const std::string& op);

// The node's attributes read once: what runs later.
struct FoldAttrs {
  int64_t opset = 0;
  int64_t axis = 0;         // Gather, Concat
  bool has_axes = false;    // Squeeze, Unsqueeze before opset 13
  std::vector<int64_t> axes;
  int64_t start = 0;        // Shape (opset 15)
  bool has_end = false;
  int64_t end = 0;
  int32_t to = 0;           // Cast
  Known value;              // ConstantOfShape (empty: float 0)
};
// What make_fold reads from a node (opset: the graph's default-domain one; where: the
// node, for a ConstantOfShape value that cannot be read).
FoldAttrs fold_attrs(const ::onnx::NodeProto& node, int64_t opset, const std::string& where);
Fold make_fold(const std::string& op, const FoldAttrs& attrs);

// The dtype of op's output for inputs of these dtypes (0 where an input is absent).
int32_t folded_dtype(const std::string& op, const FoldAttrs& attrs, const std::vector<int32_t>& inputs);

}  // namespace quartet::workloads::onnx

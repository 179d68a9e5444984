#include "workloads/onnx/program.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

#include "engine/ops.h"

namespace quartet::workloads::onnx {
namespace {

using engine::Shape;
using engine::Tensor;
using engine::TensorList;

// What a node may be asked to run, with the ONNX default domain's op names.
const std::vector<std::string> kOps = {
    "Add", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat", "Constant", "ConstantOfShape", "Conv",
    "ConvTranspose", "Div", "Dropout", "Equal", "Erf", "Expand", "Flatten", "Gather", "Gemm", "GlobalAveragePool",
    "Identity", "InstanceNormalization", "LayerNormalization", "LeakyRelu", "MatMul", "MaxPool", "Mul", "Pad",
    "Range", "Relu", "Reshape", "Resize", "Shape", "Sigmoid", "Slice", "Softmax", "Split", "Squeeze", "Sub", "Tanh",
    "Transpose", "Unsqueeze", "Upsample", "Where"};

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string dims_str(const std::vector<int64_t>& v) { return engine::shape_str(v); }

Tensor to_tensor(const Known& k) {
  Shape dims = k.dims;
  return Tensor::from_vector(dims, k.floats());
}

// Pads as ONNX writes them (all begins, then all ends) split per spatial dim.
struct Pads {
  std::vector<int64_t> begin, end;
  bool symmetric() const { return begin == end; }
};

// The convolution and pooling geometry of a node: kernel, strides, dilations, pads; the
// pads for auto_pad SAME_* follow from the input's size, so they are found at run time.
struct Window {
  std::string auto_pad = "NOTSET";
  std::vector<int64_t> kernel, strides, dilations, pads;

  Pads pads_for(const Shape& in_spatial, const Shape& kernel_sizes) const {
    const size_t n = in_spatial.size();
    Pads p{std::vector<int64_t>(n, 0), std::vector<int64_t>(n, 0)};
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      for (size_t d = 0; d < n; ++d) {
        const int64_t s = stride(d), k = kernel_sizes[d], dil = dilation(d);
        const int64_t out = (in_spatial[d] + s - 1) / s;
        const int64_t total = std::max<int64_t>(0, (out - 1) * s + (k - 1) * dil + 1 - in_spatial[d]);
        p.begin[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        p.end[d] = total - p.begin[d];
      }
    } else if (auto_pad == "NOTSET" && !pads.empty()) {
      for (size_t d = 0; d < n; ++d) {
        p.begin[d] = pads[d];
        p.end[d] = pads[n + d];
      }
    }
    return p;
  }
  int64_t stride(size_t d) const { return strides.empty() ? 1 : strides[d]; }
  int64_t dilation(size_t d) const { return dilations.empty() ? 1 : dilations[d]; }
  std::vector<int64_t> stride_list(size_t n) const { return strides.empty() ? std::vector<int64_t>(n, 1) : strides; }
  std::vector<int64_t> dilation_list(size_t n) const {
    return dilations.empty() ? std::vector<int64_t>(n, 1) : dilations;
  }
};

// x padded with `value` on the spatial dims by p.
Tensor pad_spatial(const Tensor& x, const Pads& p, float value) {
  std::vector<int64_t> b(2, 0), e(2, 0);
  b.insert(b.end(), p.begin.begin(), p.begin.end());
  e.insert(e.end(), p.end.begin(), p.end.end());
  return engine::pad(x, b, e, value);
}

int normalize_axis(int64_t axis, int rank, const std::string& where) {
  if (axis < -rank || axis >= rank)
    throw std::invalid_argument(where + ": axis " + std::to_string(axis) + " out of range for rank " +
                                std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

Tensor reshape_to(const Tensor& x, Shape s) { return engine::reshape(x, std::move(s)); }

Tensor softmax_axis(const Tensor& x, int axis) {
  const int rank = x.dim();
  if (axis == rank - 1) return engine::softmax(x);
  std::vector<int> perm(rank);
  for (int d = 0; d < rank; ++d) perm[d] = d;
  std::swap(perm[axis], perm[rank - 1]);
  return engine::transpose(engine::softmax(engine::transpose(x, perm)), perm);
}

}  // namespace

const std::vector<std::string>& supported_ops() { return kOps; }

bool is_static_input(const std::string& op, int index) {
  if (op == "Reshape" || op == "Unsqueeze" || op == "Squeeze" || op == "Clip" || op == "Pad" || op == "Dropout" ||
      op == "Slice" || op == "Split")
    return index >= 1;
  if (op == "Resize" || op == "Upsample" || op == "Gather" || op == "Expand") return index >= 1;
  if (op == "Where") return index == 0;
  return false;
}

// An integer input of a node: known at import, or a value slot a Shape chain fills at
// run time (fold.h).
struct ValueInput {
  int slot = -1;
  Known known;
  const Known& get(const Frame& f) const { return slot >= 0 ? f.ints[slot] : known; }
};

// Builds a Program node by node; every refusal names the node and its op.
struct Compiler {
  explicit Compiler(Program& program) : p(program) {}
  Program& p;
  int64_t opset = 0;
  std::map<std::string, int> slot_of;
  std::map<std::string, Known> known;
  std::map<std::string, int> init_index;  // float initializers: index into p.initializers_
  std::map<std::string, int32_t> value_dtype;  // integer values computed at run time, by name

  // The node being compiled.
  const ::onnx::NodeProto* node = nullptr;
  std::string label;

  [[noreturn]] void refuse(const std::string& what) const {
    throw std::invalid_argument("onnx: node \"" + label + "\" (op " + node->op_type() + "): " + what);
  }

  int new_slot(const std::string& name) {
    const int s = static_cast<int>(p.slot_names_.size());
    p.slot_names_.push_back(name);
    slot_of[name] = s;
    return s;
  }

  // ---- attributes ----
  const ::onnx::AttributeProto* attr(const char* name) const {
    for (const auto& a : node->attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  void allow(std::initializer_list<const char*> names) const {
    for (const auto& a : node->attribute()) {
      bool ok = false;
      for (const char* n : names) ok = ok || a.name() == n;
      if (!ok) {
        std::vector<std::string> list(names.begin(), names.end());
        refuse("attribute " + a.name() + " is not supported (supported: " + (list.empty() ? "none" : join(list)) + ")");
      }
    }
  }
  int64_t attr_int(const char* name, int64_t def) const {
    const auto* a = attr(name);
    return a ? a->i() : def;
  }
  float attr_float(const char* name, float def) const {
    const auto* a = attr(name);
    return a ? a->f() : def;
  }
  std::string attr_string(const char* name, const std::string& def) const {
    const auto* a = attr(name);
    return a ? a->s() : def;
  }
  std::vector<int64_t> attr_ints(const char* name) const {
    const auto* a = attr(name);
    return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
  }

  // ---- inputs and outputs ----
  bool has_input(int i) const { return i < node->input_size() && !node->input(i).empty(); }

  // A runtime tensor: produced by a node, a graph input, a float initializer (a
  // parameter), or a known value put in a fresh slot by a step of its own.
  int data(int i) {
    if (!has_input(i)) refuse("input " + std::to_string(i) + " is missing");
    const std::string& name = node->input(i);
    if (auto it = value_dtype.find(name); it != value_dtype.end())
      refuse("input \"" + name + "\" is an " + dtype_name(it->second) +
             " value computed from shapes where a float32 tensor is read");
    if (auto it = slot_of.find(name); it != slot_of.end()) return it->second;
    if (auto it = init_index.find(name); it != init_index.end()) {
      Initializer& init = p.initializers_[it->second];
      init.slot = new_slot(name);
      return init.slot;
    }
    if (auto it = known.find(name); it != known.end()) {
      if (it->second.dtype != ::onnx::TensorProto::FLOAT)
        refuse("input \"" + name + "\" has dtype " + dtype_name(it->second.dtype) + " where a float32 tensor is read");
      const int s = static_cast<int>(p.slot_names_.size());
      p.slot_names_.push_back(name);
      Tensor value = to_tensor(it->second);
      p.steps_.push_back({label, "Constant", {}, {s}, [s, value](Frame& f) { f.slots[s] = value.to(f.device); }});
      return s;
    }
    refuse("input \"" + name + "\" is produced by no node, input or initializer before it");
  }
  int optional_data(int i) { return has_input(i) ? data(i) : -1; }

  const Known& known_input(int i, const char* what) const {
    if (!has_input(i)) refuse(std::string("input ") + std::to_string(i) + " (" + what + ") is missing");
    const auto it = known.find(node->input(i));
    if (it == known.end())
      refuse(std::string("input ") + std::to_string(i) + " (" + what + ", \"" + node->input(i) +
             "\") must be known at import: an initializer or a Constant");
    return it->second;
  }

  ValueInput value_input(int i, const char* what) const {
    if (!has_input(i)) refuse(std::string("input ") + std::to_string(i) + " (" + what + ") is missing");
    const std::string& name = node->input(i);
    if (auto it = known.find(name); it != known.end()) return {-1, it->second};
    if (value_dtype.count(name)) return {slot_of.at(name), {}};
    refuse(std::string("input ") + std::to_string(i) + " (" + what + ", \"" + name +
           "\") must be known at import or computed from shapes: an initializer, a Constant or a Shape chain");
  }

  int output(int i) {
    if (i >= node->output_size() || node->output(i).empty()) refuse("output " + std::to_string(i) + " is missing");
    return new_slot(node->output(i));
  }
  // Optional outputs (masks, indices, saved statistics) are refused when asked for.
  void only_outputs(int n) const {
    for (int i = n; i < node->output_size(); ++i)
      if (!node->output(i).empty())
        refuse("output " + std::to_string(i) + " (\"" + node->output(i) + "\") is not supported; only the first " +
               std::to_string(n));
  }

  void step(std::vector<int> reads, std::vector<int> writes, std::function<void(Frame&)> run) {
    p.steps_.push_back({label, node->op_type(), std::move(reads), std::move(writes), std::move(run)});
  }
  // One input, one output.
  void unary(std::function<Tensor(const Tensor&)> fn) {
    only_outputs(1);
    const int x = data(0), y = output(0);
    step({x}, {y}, [x, y, fn = std::move(fn)](Frame& f) { f.slots[y] = fn(f.slots[x]); });
  }

  // A tensor (input 0) and a shape (input 1) known at import or computed from shapes.
  void with_shape(std::function<Tensor(const Tensor&, const std::vector<int64_t>&)> fn) {
    only_outputs(1);
    const ValueInput shape = value_input(1, "shape");
    const int x = data(0), y = output(0);
    std::vector<int> reads = {x};
    if (shape.slot >= 0) reads.push_back(shape.slot);
    step(reads, {y}, [x, y, shape, fn = std::move(fn)](Frame& f) { f.slots[y] = fn(f.slots[x], shape.get(f).ints()); });
  }

  Window window(bool with_dilations) const {
    Window w;
    w.auto_pad = attr_string("auto_pad", "NOTSET");
    if (w.auto_pad != "NOTSET" && w.auto_pad != "VALID" && w.auto_pad != "SAME_UPPER" && w.auto_pad != "SAME_LOWER")
      refuse("auto_pad " + w.auto_pad + " is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER");
    w.kernel = attr_ints("kernel_shape");
    w.strides = attr_ints("strides");
    w.pads = attr_ints("pads");
    if (with_dilations) w.dilations = attr_ints("dilations");
    for (int64_t v : w.pads)
      if (v < 0) refuse("negative pads " + dims_str(w.pads) + " are not supported");
    return w;
  }

  // ---- the ops ----
  void compile_node();
  bool fold_node();
  void gather();
  void where();
  void conv();
  void conv_transpose();
  void gemm();
  void pool(bool max);
  void batch_norm();
  void resize();
  void pad();
  void constant();
  void squeeze(bool un);
  void slice();
  void split();
};

void Compiler::compile_node() {
  const std::string& op = node->op_type();
  if (!node->domain().empty() && node->domain() != "ai.onnx")
    refuse("domain " + node->domain() + " is not supported; supported ops (default domain): " + join(kOps));
  if (fold_node()) return;
  if (op == "Gather") return gather();
  if (op == "Where") return where();
  if (op == "Expand") {
    allow({});
    only_outputs(1);
    const std::string where = "onnx: node \"" + label + "\" (op Expand)";
    return with_shape([where](const Tensor& x, const std::vector<int64_t>& s) {
      try {
        return engine::expand(x, engine::broadcast_shape(x.shape(), Shape(s.begin(), s.end())));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(where + ": " + e.what());
      }
    });
  }
  if (op == "Cast") {
    // A float tensor cast to float: what the exporter writes around a dtype it cannot see.
    allow({"to"});
    if (attr_int("to", 0) != ::onnx::TensorProto::FLOAT)
      refuse("a cast of a float32 tensor computed at run time to " +
             std::string(dtype_name(static_cast<int32_t>(attr_int("to", 0)))) + " is not supported (only to float32)");
    return unary([](const Tensor& x) { return x; });
  }
  if (op == "Conv") return conv();
  if (op == "ConvTranspose") return conv_transpose();
  if (op == "Gemm") return gemm();
  if (op == "MaxPool") return pool(true);
  if (op == "AveragePool") return pool(false);
  if (op == "BatchNormalization") return batch_norm();
  if (op == "Resize" || op == "Upsample") return resize();
  if (op == "Pad") return pad();
  if (op == "Constant") return constant();
  if (op == "Squeeze") return squeeze(false);
  if (op == "Slice") return slice();
  if (op == "Split") return split();
  if (op == "Unsqueeze") return squeeze(true);
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    allow({});
    only_outputs(1);
    const int a = data(0), b = data(1), y = output(0);
    Tensor (*fn)(const Tensor&, const Tensor&) = op == "Add"   ? &engine::add
                                                 : op == "Sub" ? &engine::sub
                                                 : op == "Mul" ? &engine::mul
                                                               : &engine::div;
    return step({a, b}, {y}, [a, b, y, fn](Frame& f) { f.slots[y] = fn(f.slots[a], f.slots[b]); });
  }
  if (op == "MatMul") {
    allow({});
    only_outputs(1);
    const int a = data(0), b = data(1), y = output(0);
    return step({a, b}, {y}, [a, b, y](Frame& f) {
      Tensor x = f.slots[a], w = f.slots[b];
      const bool va = x.dim() == 1, vb = w.dim() == 1;
      if (va) x = reshape_to(x, {1, x.size(0)});
      if (vb) w = reshape_to(w, {w.size(0), 1});
      Tensor out = engine::batched_matmul(x, w);
      Shape s = out.shape();
      if (va) s.erase(s.end() - 2);
      if (vb) s.erase(s.end() - 1);
      f.slots[y] = s == out.shape() ? out : reshape_to(out, s);
    });
  }
  if (op == "Relu") {
    allow({});
    only_outputs(1);
    const int x = data(0), y = output(0);
    return step({x}, {y}, [x, y](Frame& f) {
      f.slots[y] = f.dying[x] ? engine::relu_reusing(std::move(f.slots[x])) : engine::relu(f.slots[x]);
    });
  }
  if (op == "Erf") {
    allow({});
    return unary([](const Tensor& x) { return engine::erf(x); });
  }
  if (op == "Sigmoid") {
    allow({});
    return unary([](const Tensor& x) { return engine::sigmoid(x); });
  }
  if (op == "Tanh") {
    allow({});
    return unary([](const Tensor& x) { return engine::tanh(x); });
  }
  if (op == "Identity" && has_input(0) && init_index.count(node->input(0)) && node->output_size() == 1) {
    // PyTorch's exporter keeps one copy of initializers with equal values (BatchNorm's
    // initial ones and zeros) and names the others through Identity nodes: each name is
    // a tensor of its own in PyTorch, so a parameter of its own here.
    allow({});
    const Initializer& from = p.initializers_[init_index[node->input(0)]];
    init_index[node->output(0)] = static_cast<int>(p.initializers_.size());
    p.initializers_.push_back({node->output(0), from.value.clone(), false, -1, -1, -1});
    known[node->output(0)] = known.at(node->input(0));
    return;
  }
  if (op == "Identity") {
    allow({});
    return unary([](const Tensor& x) { return x; });
  }
  if (op == "LeakyRelu") {
    allow({"alpha"});
    const float alpha = attr_float("alpha", 0.01f);
    return unary([alpha](const Tensor& x) { return engine::leaky_relu(x, alpha); });
  }
  if (op == "Clip") {
    float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
    if (opset < 11) {
      allow({"min", "max"});
      lo = attr_float("min", lo);
      hi = attr_float("max", hi);
    } else {
      allow({});
      if (has_input(1)) lo = static_cast<float>(known_input(1, "min").values.at(0));
      if (has_input(2)) hi = static_cast<float>(known_input(2, "max").values.at(0));
    }
    return unary([lo, hi](const Tensor& x) { return engine::clip(x, lo, hi); });
  }
  if (op == "Softmax") {
    allow({"axis"});
    const int64_t axis = attr_int("axis", opset < 13 ? 1 : -1);
    const bool flat = opset < 13;
    const std::string where = "onnx: node \"" + label + "\" (op Softmax)";
    return unary([axis, flat, where](const Tensor& x) {
      const int a = normalize_axis(axis, x.dim(), where);
      if (!flat) return softmax_axis(x, a);
      // Before opset 13: over the dims from axis on, flattened.
      int64_t outer = 1;
      for (int d = 0; d < a; ++d) outer *= x.size(d);
      return reshape_to(engine::softmax(reshape_to(x, {outer, x.numel() / std::max<int64_t>(outer, 1)})), x.shape());
    });
  }
  if (op == "GlobalAveragePool") {
    allow({});
    return unary([](const Tensor& x) {
      Shape s = x.shape();
      for (size_t d = 2; d < s.size(); ++d) s[d] = 1;
      return reshape_to(engine::global_avg_pool(x), s);
    });
  }
  if (op == "InstanceNormalization") {
    allow({"epsilon"});
    only_outputs(1);
    const float eps = attr_float("epsilon", 1e-5f);
    const int x = data(0), w = data(1), b = data(2), y = output(0);
    return step({x, w, b}, {y}, [x, w, b, y, eps](Frame& f) {
      const Tensor& in = f.slots[x];
      f.slots[y] = engine::group_norm(in, in.size(1), f.slots[w], f.slots[b], eps);
    });
  }
  if (op == "LayerNormalization") {
    allow({"axis", "epsilon", "stash_type"});
    only_outputs(1);
    const int64_t axis = attr_int("axis", -1);
    const float eps = attr_float("epsilon", 1e-5f);
    const int x = data(0), w = data(1), b = optional_data(2), y = output(0);
    const std::string where = "onnx: node \"" + label + "\" (op LayerNormalization)";
    return step({x, w, b}, {y}, [x, w, b, y, eps, axis, where](Frame& f) {
      const Tensor& in = f.slots[x];
      if (normalize_axis(axis, in.dim(), where) != in.dim() - 1)
        throw std::invalid_argument(where + ": axis " + std::to_string(axis) +
                                    " is not supported; only the last dim (-1)");
      f.slots[y] = engine::layer_norm(in, f.slots[w], b >= 0 ? f.slots[b] : Tensor(), eps);
    });
  }
  if (op == "Flatten") {
    allow({"axis"});
    const int64_t axis = attr_int("axis", 1);
    const std::string where = "onnx: node \"" + label + "\" (op Flatten)";
    return unary([axis, where](const Tensor& x) {
      const int a = axis == x.dim() ? x.dim() : normalize_axis(axis, x.dim(), where);
      int64_t outer = 1;
      for (int d = 0; d < a; ++d) outer *= x.size(d);
      return reshape_to(x, {outer, outer == 0 ? 0 : x.numel() / outer});
    });
  }
  if (op == "Reshape") {
    allow({"allowzero"});
    if (attr_int("allowzero", 0) != 0) refuse("allowzero 1 is not supported");
    const std::string where = "onnx: node \"" + label + "\" (op Reshape)";
    return with_shape([where](const Tensor& x, const std::vector<int64_t>& target) {
      Shape s = target;
      for (size_t d = 0; d < s.size(); ++d)
        if (s[d] == 0) {
          if (d >= static_cast<size_t>(x.dim()))
            throw std::invalid_argument(where + ": shape " + dims_str(target) + " copies dim " + std::to_string(d) +
                                        " of " + engine::shape_str(x.shape()) + ", which it lacks");
          s[d] = x.size(static_cast<int>(d));
        }
      return reshape_to(x, s);
    });
  }
  if (op == "Transpose") {
    allow({"perm"});
    const std::vector<int64_t> perm = attr_ints("perm");
    return unary([perm](const Tensor& x) {
      std::vector<int> p(x.dim());
      for (int d = 0; d < x.dim(); ++d) p[d] = perm.empty() ? x.dim() - 1 - d : static_cast<int>(perm[d]);
      return engine::transpose(x, p);
    });
  }
  if (op == "Concat") {
    allow({"axis"});
    only_outputs(1);
    const int64_t axis = attr_int("axis", 1);
    std::vector<int> xs;
    for (int i = 0; i < node->input_size(); ++i) xs.push_back(data(i));
    const int y = output(0);
    return step(xs, {y}, [xs, y, axis](Frame& f) {
      TensorList in;
      for (int s : xs) in.push_back(f.slots[s]);
      f.slots[y] = in.size() == 1 ? in[0] : engine::concat(in, static_cast<int>(axis));
    });
  }
  if (op == "Dropout") {
    float ratio = 0.5f;
    if (opset < 12) {
      allow({"ratio", "is_test"});
      ratio = attr_float("ratio", 0.5f);
    } else {
      allow({"seed"});
      if (has_input(1)) ratio = static_cast<float>(known_input(1, "ratio").values.at(0));
      if (has_input(2) && known_input(2, "training_mode").values.at(0) != 0.0)
        refuse("training_mode true is not supported: the regime's train and eval modes decide");
    }
    only_outputs(1);
    if (!(ratio >= 0.0f && ratio < 1.0f)) refuse("ratio " + std::to_string(ratio) + " outside [0, 1)");
    const int x = data(0), y = output(0);
    return step({x}, {y}, [x, y, ratio](Frame& f) {
      f.slots[y] = f.training && ratio > 0.0f && f.gen ? engine::dropout(f.slots[x], ratio, *f.gen) : f.slots[x];
    });
  }
  refuse("op " + op + " is not supported; supported ops: " + join(kOps));
}

// Integer nodes (fold.h): folded here when their inputs are known, else a host step on
// the shapes at hand. False for a node that runs as engine ops on float tensors.
bool Compiler::fold_node() {
  const std::string& op = node->op_type();
  if (!is_foldable(op)) return false;
  // The inputs whose kind decides: the data a Reshape, Gather, ... reads, both branches
  // of a Where, every input of the rest.
  std::vector<int> deciding;
  if (op == "Reshape" || op == "Expand" || op == "Unsqueeze" || op == "Squeeze" || op == "Slice" || op == "Gather" ||
      op == "Cast" || op == "Identity")
    deciding = {0};
  else if (op == "Where")
    deciding = {1, 2};
  bool any_value = false, all_known = true, any_float_runtime = false;
  for (int i = 0; i < node->input_size(); ++i) {
    if (!has_input(i)) continue;
    const std::string& n = node->input(i);
    const bool decides = deciding.empty() || std::find(deciding.begin(), deciding.end(), i) != deciding.end();
    const bool is_value = value_dtype.count(n) > 0, is_known = known.count(n) > 0 && !init_index.count(n);
    if (!is_known) all_known = false;
    // An integer input that decides: a value computed from shapes, or an integer or bool
    // tensor known at import (GPT-2 slices its constant mask to the sequence at hand).
    if (decides && (is_value || (is_known && known.at(n).dtype != ::onnx::TensorProto::FLOAT))) any_value = true;
    if (decides && !is_value && !is_known) any_float_runtime = true;
  }
  const bool always = op == "Shape" || op == "ConstantOfShape" || op == "Range" || op == "Equal";
  if (!always && !all_known && !any_value) return false;
  if (op != "Shape" && any_float_runtime)
    refuse("op " + op + " mixes float32 tensors computed at run time with integer values; only integer values "
           "known at import or computed from shapes are supported here");
  if (op == "Identity" && any_value && node->output_size() == 1) {
    value_dtype[node->output(0)] = value_dtype.at(node->input(0));
    slot_of[node->output(0)] = slot_of.at(node->input(0));
    return true;
  }

  if (op == "Gather" || op == "Concat") {
    allow({"axis"});
  } else if (op == "Squeeze" || op == "Unsqueeze") {
    allow({"axes"});
  } else if (op == "Shape") {
    allow({"start", "end"});
  } else if (op == "Cast") {
    allow({"to"});
  } else if (op == "Reshape") {
    allow({"allowzero"});
    if (attr_int("allowzero", 0) != 0) refuse("allowzero 1 is not supported");
  } else if (op == "ConstantOfShape") {
    allow({"value"});
  } else {
    allow({});
  }
  const FoldAttrs at = fold_attrs(*node, opset, "onnx: node \"" + label + "\" (op " + op + ")");
  only_outputs(1);
  const Fold fn = make_fold(op, at);
  std::vector<ValueInput> ins;
  std::vector<int32_t> dtypes;
  std::vector<int> reads;
  int shape_of = -1;  // Shape of a runtime tensor: the slot whose shape it reads
  for (int i = 0; i < node->input_size(); ++i) {
    if (!has_input(i)) {
      ins.push_back({});
      dtypes.push_back(0);
      continue;
    }
    const std::string& n = node->input(i);
    if (op == "Shape" && i == 0 && !known.count(n) && !value_dtype.count(n)) {
      shape_of = data(0);
      reads.push_back(shape_of);
      ins.push_back({});
      dtypes.push_back(::onnx::TensorProto::FLOAT);
      continue;
    }
    ins.push_back(value_input(i, "an integer value"));
    dtypes.push_back(ins.back().slot >= 0 ? value_dtype.at(n) : ins.back().known.dtype);
    if (ins.back().slot >= 0) reads.push_back(ins.back().slot);
  }
  const std::string where = "onnx: node \"" + label + "\" (op " + op + ")";
  if (reads.empty()) {
    std::vector<Known> args;
    for (const ValueInput& v : ins) args.push_back(v.known);
    try {
      known[node->output(0)] = fn(args);
    } catch (const std::invalid_argument& e) {
      refuse(e.what());
    }
    return true;
  }
  const int32_t dtype = folded_dtype(op, at, dtypes);
  const bool to_float = dtype == ::onnx::TensorProto::FLOAT;
  if (!to_float) value_dtype[node->output(0)] = dtype;
  const int y = output(0);
  if (!to_float) p.value_slots_.insert(y);
  step(reads, {y}, [fn, ins, shape_of, y, to_float, where](Frame& f) {
    std::vector<Known> args;
    for (const ValueInput& v : ins) args.push_back(v.get(f));
    if (shape_of >= 0) args[0] = {::onnx::TensorProto::FLOAT, f.slots[shape_of].shape(), {}};
    Known r;
    try {
      r = fn(args);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + ": " + e.what());
    }
    if (to_float)
      f.slots[y] = to_tensor(r).to(f.device);
    else
      f.ints[y] = std::move(r);
  });
  return true;
}

void Compiler::gather() {
  allow({"axis"});
  only_outputs(1);
  const int64_t axis = attr_int("axis", 0);
  const ValueInput idx = value_input(1, "indices");
  if (idx.slot < 0 && idx.known.dtype != ::onnx::TensorProto::INT64 && idx.known.dtype != ::onnx::TensorProto::INT32)
    refuse(std::string("indices of dtype ") + dtype_name(idx.known.dtype) + " (supported: int64, int32)");
  const int x = data(0), y = output(0);
  std::vector<int> reads = {x};
  if (idx.slot >= 0) reads.push_back(idx.slot);
  const std::string where = "onnx: node \"" + label + "\" (op Gather)";
  step(reads, {y}, [x, y, idx, axis, where](Frame& f) {
    const Tensor& in = f.slots[x];
    const Known& i = idx.get(f);
    try {
      f.slots[y] = engine::gather(in, normalize_axis(axis, in.dim(), where), i.ints(), i.dims);
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      throw std::invalid_argument(what.rfind(where, 0) == 0 ? what : where + ": " + what);
    }
  });
}

void Compiler::where() {
  allow({});
  only_outputs(1);
  const ValueInput cond = value_input(0, "condition");
  const int a = data(1), b = data(2), y = output(0);
  std::vector<int> reads = {a, b};
  if (cond.slot >= 0) reads.push_back(cond.slot);
  // A condition known at import becomes its float mask once.
  const Tensor mask = cond.slot < 0 ? to_tensor(cond.known) : Tensor();
  step(reads, {y}, [a, b, y, slot = cond.slot, mask](Frame& f) {
    const Tensor c = mask.defined() ? mask.to(f.device) : to_tensor(f.ints[slot]).to(f.device);
    f.slots[y] = engine::where(c, f.slots[a], f.slots[b]);
  });
}

void Compiler::conv() {
  allow({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  only_outputs(1);
  const Window win = window(true);
  const int64_t groups = attr_int("group", 1);
  if (groups < 1) refuse("group " + std::to_string(groups) + " must be >= 1");
  const int x = data(0), w = data(1), b = optional_data(2), y = output(0);
  const std::string where = "onnx: node \"" + label + "\" (op Conv)";
  step({x, w, b}, {y}, [=](Frame& f) {
    Tensor in = f.slots[x];
    const Tensor& weight = f.slots[w];
    const Tensor bias = b >= 0 ? f.slots[b] : Tensor();
    const int spatial = in.dim() - 2;
    if (spatial < 1 || weight.dim() != in.dim())
      throw std::invalid_argument(where + ": input " + engine::shape_str(in.shape()) + " and weight " +
                                  engine::shape_str(weight.shape()) + " are no 1D to 3D convolution");
    const Shape kernel(weight.shape().begin() + 2, weight.shape().end());
    const Shape in_spatial(in.shape().begin() + 2, in.shape().end());
    const Pads pads = win.pads_for(in_spatial, kernel);
    engine::ConvOptions opt{win.stride_list(spatial), pads.begin, win.dilation_list(spatial)};
    if (!pads.symmetric()) {
      in = pad_spatial(in, pads, 0.0f);
      opt.padding = {0};
    }
    if (groups == 1) {
      f.slots[y] = engine::conv(in, weight, bias, opt);
      return;
    }
    const int64_t cin = in.size(1) / groups, cout = weight.size(0) / groups;
    if (in.size(1) % groups != 0 || weight.size(0) % groups != 0 || weight.size(1) != cin)
      throw std::invalid_argument(where + ": group " + std::to_string(groups) + " does not divide input " +
                                  engine::shape_str(in.shape()) + " and weight " + engine::shape_str(weight.shape()));
    TensorList parts;
    for (int64_t g = 0; g < groups; ++g)
      parts.push_back(engine::conv(engine::narrow(in, 1, g * cin, cin), engine::narrow(weight, 0, g * cout, cout),
                                   bias.defined() ? engine::narrow(bias, 0, g * cout, cout) : Tensor(), opt));
    f.slots[y] = engine::concat(parts, 1);
  });
}

void Compiler::conv_transpose() {
  allow({"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "pads", "strides"});
  only_outputs(1);
  const Window win = window(true);
  if (win.auto_pad != "NOTSET") refuse("auto_pad " + win.auto_pad + " is not supported (only NOTSET)");
  if (attr_int("group", 1) != 1) refuse("group " + std::to_string(attr_int("group", 1)) + " is not supported (only 1)");
  const std::vector<int64_t> out_pad = attr_ints("output_padding");
  const int x = data(0), w = data(1), b = optional_data(2), y = output(0);
  const size_t n = win.pads.size() / 2;
  for (size_t d = 0; d < n; ++d)
    if (win.pads[d] != win.pads[n + d]) refuse("asymmetric pads " + dims_str(win.pads) + " are not supported");
  step({x, w, b}, {y}, [=](Frame& f) {
    const Tensor& in = f.slots[x];
    const size_t spatial = static_cast<size_t>(in.dim() - 2);
    engine::ConvTransposeOptions opt;
    opt.stride = win.stride_list(spatial);
    opt.dilation = win.dilation_list(spatial);
    opt.padding = win.pads.empty() ? std::vector<int64_t>{0}
                                   : std::vector<int64_t>(win.pads.begin(), win.pads.begin() + spatial);
    opt.output_padding = out_pad.empty() ? std::vector<int64_t>{0} : out_pad;
    f.slots[y] = engine::conv_transpose(in, f.slots[w], b >= 0 ? f.slots[b] : Tensor(), opt);
  });
}

void Compiler::gemm() {
  allow({"alpha", "beta", "broadcast", "transA", "transB"});  // broadcast (before opset 7): C broadcasts anyway
  only_outputs(1);
  const float alpha = attr_float("alpha", 1.0f), beta = attr_float("beta", 1.0f);
  const bool ta = attr_int("transA", 0) != 0, tb = attr_int("transB", 0) != 0;
  const int a = data(0), b = data(1), c = optional_data(2), y = output(0);
  step({a, b, c}, {y}, [=](Frame& f) {
    const Tensor A = ta ? engine::transpose(f.slots[a], {1, 0}) : f.slots[a];
    const Tensor& B = f.slots[b];
    const Tensor C = c >= 0 ? f.slots[c] : Tensor();
    // PyTorch's Linear: B as (out, in), C as (out): one fused op.
    const bool fused = tb && alpha == 1.0f && beta == 1.0f && C.defined() && C.dim() == 1 && C.size(0) == B.size(0);
    if (fused) {
      f.slots[y] = engine::linear(A, B, C);
      return;
    }
    Tensor out = tb ? engine::linear(A, B, Tensor()) : engine::matmul(A, B);
    if (alpha != 1.0f) out = engine::scale(out, alpha);
    if (C.defined() && beta != 0.0f) out = engine::add(out, beta == 1.0f ? C : engine::scale(C, beta));
    f.slots[y] = out;
  });
}

void Compiler::pool(bool max) {
  if (max) allow({"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"});
  else allow({"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"});
  only_outputs(1);
  const Window win = window(max);
  if (attr_int("ceil_mode", 0) != 0) refuse("ceil_mode 1 is not supported (only 0)");
  for (int64_t d : win.dilations)
    if (d != 1) refuse("dilations " + dims_str(win.dilations) + " are not supported (only 1)");
  if (win.kernel.empty()) refuse("kernel_shape is missing");
  const bool include_pad = attr_int("count_include_pad", 0) != 0;
  const std::string where = std::string("onnx: node \"") + label + "\" (op " + node->op_type() + ")";
  const int x = data(0), y = output(0);
  step({x}, {y}, [=](Frame& f) {
    Tensor in = f.slots[x];
    const Shape in_spatial(in.shape().begin() + 2, in.shape().end());
    if (in_spatial.size() != win.kernel.size())
      throw std::invalid_argument(where + ": kernel_shape " + dims_str(win.kernel) + " does not fit input " +
                                  engine::shape_str(in.shape()));
    const Pads pads = win.pads_for(in_spatial, win.kernel);
    engine::PoolOptions opt{win.kernel, win.stride_list(win.kernel.size()), pads.begin};
    bool any_pad = false;
    for (size_t d = 0; d < pads.begin.size(); ++d) any_pad = any_pad || pads.begin[d] != 0 || pads.end[d] != 0;
    // The engine's pools pad symmetrically, by at most half the kernel; other pads go in
    // front (-inf never wins a max, zeros count as PyTorch's count_include_pad does).
    bool wide = !pads.symmetric();
    for (size_t d = 0; d < pads.begin.size(); ++d) wide = wide || 2 * pads.begin[d] > win.kernel[d];
    if (wide) {
      in = pad_spatial(in, pads, max ? -std::numeric_limits<float>::infinity() : 0.0f);
      opt.padding = {0};
    }
    if (max) {
      f.slots[y] = engine::max_pool(in, opt);
      return;
    }
    Tensor out = engine::avg_pool(in, opt);
    if (any_pad && !include_pad) {
      // ONNX's default divides by the window's cells inside the input: the mean over the
      // padded window, divided by the share of it that the input covers.
      Shape ones_shape = f.slots[x].shape();
      ones_shape[0] = ones_shape[1] = 1;
      Tensor ones = Tensor::full(ones_shape, 1.0f, in.device());
      if (wide) ones = pad_spatial(ones, pads, 0.0f);
      out = engine::div(out, engine::avg_pool(ones, opt));
    }
    f.slots[y] = out;
  });
}

void Compiler::batch_norm() {
  // is_test and consumed_inputs (before opset 7): the regime's train and eval modes decide.
  allow({"consumed_inputs", "epsilon", "is_test", "momentum", "spatial", "training_mode"});
  if (attr_int("spatial", 1) != 1) refuse("spatial 0 is not supported");
  if (attr_int("training_mode", 0) != 0) refuse("training_mode 1 is not supported: the regime's modes decide");
  only_outputs(1);
  const float eps = attr_float("epsilon", 1e-5f), momentum = attr_float("momentum", 0.9f);
  for (int i = 3; i <= 4; ++i)
    if (has_input(i) && init_index.count(node->input(i))) {
      p.initializers_[init_index[node->input(i)]].buffer = true;
    }
  const int x = data(0), w = data(1), b = data(2), m = data(3), v = data(4), y = output(0);
  step({x, w, b, m, v}, {y}, [=](Frame& f) {
    engine::BatchNormOptions opt;
    opt.eps = eps;
    opt.momentum = 1.0f - momentum;  // ONNX keeps `momentum` of the running value, PyTorch replaces it
    opt.reducer = f.stats_reducer;
    f.slots[y] = engine::batch_norm(f.slots[x], f.slots[w], f.slots[b], f.slots[m], f.slots[v], f.training, opt);
  });
}

void Compiler::resize() {
  const bool upsample = node->op_type() == "Upsample";
  std::string mode = attr_string("mode", "nearest");
  std::vector<double> scales;
  if (upsample) {
    allow({"mode", "scales"});
    if (opset < 9) {
      const auto* a = attr("scales");
      if (a) scales.assign(a->floats().begin(), a->floats().end());
    } else {
      scales = known_input(1, "scales").values;
    }
    if (mode != "nearest") refuse("mode " + mode + " is not supported for Upsample (only nearest)");
  } else {
    allow({"coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside", "extrapolation_value", "mode",
           "nearest_mode"});
    const std::string ctm = attr_string("coordinate_transformation_mode", opset < 11 ? "asymmetric" : "half_pixel");
    const std::string nearest = attr_string("nearest_mode", "round_prefer_floor");
    if (attr_int("exclude_outside", 0) != 0) refuse("exclude_outside 1 is not supported");
    const bool half = ctm == "half_pixel" || ctm == "pytorch_half_pixel";
    if (mode == "nearest") {
      const bool ok = opset < 11 || (half && (nearest == "round_prefer_floor" || nearest == "round_prefer_ceil")) ||
                      (ctm == "asymmetric" && nearest == "floor");
      if (!ok)
        refuse("nearest with coordinate_transformation_mode " + ctm + " and nearest_mode " + nearest +
               " is not supported (half_pixel or pytorch_half_pixel with round_prefer_floor or round_prefer_ceil, "
               "or asymmetric with floor)");
    } else if (mode == "linear") {
      if (opset < 11 || !half)
        refuse("linear with coordinate_transformation_mode " + ctm +
               " is not supported (half_pixel or pytorch_half_pixel: PyTorch's align_corners=False)");
    } else {
      refuse("mode " + mode + " is not supported (nearest, linear)");
    }
    const int scales_at = opset < 11 ? 1 : 2;
    if (has_input(scales_at) && !known_input(scales_at, "scales").values.empty()) {
      scales = known_input(scales_at, "scales").values;
    } else if (opset >= 11 && has_input(3)) {
      const std::vector<int64_t> sizes = known_input(3, "sizes").ints();
      // Sizes become scales once the input's size is known: checked at run time.
      const int x = data(0), y = output(0);
      const engine::UpsampleMode um = mode == "linear" ? engine::UpsampleMode::linear : engine::UpsampleMode::nearest;
      const std::string where = "onnx: node \"" + label + "\" (op Resize)";
      only_outputs(1);
      return step({x}, {y}, [=](Frame& f) {
        const Tensor& in = f.slots[x];
        if (static_cast<int>(sizes.size()) != in.dim())
          throw std::invalid_argument(where + ": sizes " + dims_str(sizes) + " do not fit input " +
                                      engine::shape_str(in.shape()));
        std::vector<int64_t> factor;
        for (int d = 0; d < in.dim(); ++d) {
          if (sizes[d] % in.size(d) != 0 || (d < 2 && sizes[d] != in.size(d)))
            throw std::invalid_argument(where + ": sizes " + dims_str(sizes) + " are no whole multiples of input " +
                                        engine::shape_str(in.shape()) + " on the spatial dims only");
          if (d >= 2) factor.push_back(sizes[d] / in.size(d));
        }
        f.slots[y] = engine::upsample(in, factor, um);
      });
    } else {
      refuse("neither scales nor sizes given");
    }
  }
  std::vector<int64_t> factor;
  for (size_t d = 0; d < scales.size(); ++d) {
    const double s = scales[d];
    if (s < 1.0 || s != std::floor(s) || (d < 2 && s != 1.0))
      refuse("scales " + [&] {
        std::string out;
        for (double v : scales) out += (out.empty() ? "" : ", ") + std::to_string(v);
        return out;
      }() + " are not supported: 1 on N and C, whole numbers >= 1 on the spatial dims");
    if (d >= 2) factor.push_back(static_cast<int64_t>(s));
  }
  if (factor.empty()) refuse("scales must cover N, C and 1 to 3 spatial dims");
  const engine::UpsampleMode um = mode == "linear" ? engine::UpsampleMode::linear : engine::UpsampleMode::nearest;
  unary([factor, um](const Tensor& x) { return engine::upsample(x, factor, um); });
}

void Compiler::pad() {
  std::vector<int64_t> pads;
  float value = 0.0f;
  if (opset < 11) {
    allow({"mode", "pads", "value"});
    pads = attr_ints("pads");
    value = attr_float("value", 0.0f);
  } else {
    allow({"mode"});
    pads = known_input(1, "pads").ints();
    if (has_input(2)) {
      const Known& v = known_input(2, "constant_value");
      if (!v.values.empty()) value = static_cast<float>(v.values[0]);
    }
    if (has_input(3)) refuse("input 3 (axes) is not supported");
  }
  const std::string mode = attr_string("mode", "constant");
  if (mode != "constant") refuse("mode " + mode + " is not supported (only constant)");
  for (int64_t v : pads)
    if (v < 0) refuse("negative pads " + dims_str(pads) + " are not supported");
  const std::string where = "onnx: node \"" + label + "\" (op Pad)";
  unary([pads, value, where](const Tensor& x) {
    const size_t n = static_cast<size_t>(x.dim());
    if (pads.size() != 2 * n)
      throw std::invalid_argument(where + ": pads " + dims_str(pads) + " do not fit input " +
                                  engine::shape_str(x.shape()));
    return engine::pad(x, {pads.begin(), pads.begin() + n}, {pads.begin() + n, pads.end()}, value);
  });
}

void Compiler::constant() {
  allow({"value", "value_float", "value_floats", "value_int", "value_ints"});
  Known k;
  if (const auto* a = attr("value")) {
    k = read_known(a->t(), "onnx: node \"" + label + "\" (op Constant)");
  } else if (const auto* a = attr("value_float")) {
    k = {::onnx::TensorProto::FLOAT, {}, {a->f()}};
  } else if (const auto* a = attr("value_floats")) {
    k = {::onnx::TensorProto::FLOAT, {a->floats_size()}, {a->floats().begin(), a->floats().end()}};
  } else if (const auto* a = attr("value_int")) {
    k = {::onnx::TensorProto::INT64, {}, {static_cast<double>(a->i())}};
  } else if (const auto* a = attr("value_ints")) {
    k = {::onnx::TensorProto::INT64, {a->ints_size()}, {}};
    for (int64_t v : a->ints()) k.values.push_back(static_cast<double>(v));
  } else {
    refuse("no value attribute");
  }
  only_outputs(1);
  known[node->output(0)] = std::move(k);
}

void Compiler::squeeze(bool un) {
  std::vector<int64_t> axes;
  if (opset < 13) {
    allow({"axes"});
    axes = attr_ints("axes");
  } else {
    allow({});
    if (has_input(1)) axes = known_input(1, "axes").ints();
  }
  if (un && axes.empty()) refuse("axes are missing");
  const std::string where = "onnx: node \"" + label + "\" (op " + node->op_type() + ")";
  unary([axes, un, where](const Tensor& x) {
    Shape s = x.shape();
    if (un) {
      const int rank = x.dim() + static_cast<int>(axes.size());
      std::vector<int> at;
      for (int64_t a : axes) at.push_back(normalize_axis(a, rank, where));
      std::sort(at.begin(), at.end());
      for (int a : at) s.insert(s.begin() + a, 1);
    } else if (axes.empty()) {
      s.erase(std::remove(s.begin(), s.end(), 1), s.end());
    } else {
      std::vector<int> at;
      for (int64_t a : axes) at.push_back(normalize_axis(a, x.dim(), where));
      std::sort(at.rbegin(), at.rend());
      for (int a : at) {
        if (s[a] != 1)
          throw std::invalid_argument(where + ": dim " + std::to_string(a) + " of " + engine::shape_str(x.shape()) +
                                      " is not 1");
        s.erase(s.begin() + a);
      }
    }
    return reshape_to(x, s);
  });
}

void Compiler::slice() {
  // starts, ends, axes, steps: attributes before opset 10, then inputs known at import or
  // computed from shapes (GPT-2 slices its mask buffer to the sequence at hand).
  std::vector<ValueInput> v(4);
  if (opset < 10) {
    allow({"axes", "ends", "starts"});
    auto from = [](std::vector<int64_t> ints) {
      Known k{::onnx::TensorProto::INT64, {static_cast<int64_t>(ints.size())}, {}};
      for (int64_t i : ints) k.values.push_back(static_cast<double>(i));
      return ValueInput{-1, k};
    };
    v = {from(attr_ints("starts")), from(attr_ints("ends")), from(attr_ints("axes")), from({})};
  } else {
    allow({});
    v[0] = value_input(1, "starts");
    v[1] = value_input(2, "ends");
    if (has_input(3)) v[2] = value_input(3, "axes");
    if (has_input(4)) v[3] = value_input(4, "steps");
  }
  const std::string where = "onnx: node \"" + label + "\" (op Slice)";
  // What a slice asks for, checked here when known and at run time when computed.
  auto check = [where](const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                       const std::vector<int64_t>& axes, const std::vector<int64_t>& steps) {
    for (int64_t st : steps)
      if (st != 1) throw std::invalid_argument(where + ": steps " + dims_str(steps) + " are not supported (only 1)");
    if (starts.size() != ends.size() || (!axes.empty() && axes.size() != starts.size()))
      throw std::invalid_argument(where + ": starts " + dims_str(starts) + ", ends " + dims_str(ends) + " and axes " +
                                  dims_str(axes) + " differ in length");
  };
  const bool all_known = std::all_of(v.begin(), v.end(), [](const ValueInput& i) { return i.slot < 0; });
  if (all_known) check(v[0].known.ints(), v[1].known.ints(), v[2].known.ints(), v[3].known.ints());
  only_outputs(1);
  const int x = data(0), y = output(0);
  std::vector<int> reads = {x};
  for (const ValueInput& i : v)
    if (i.slot >= 0) reads.push_back(i.slot);
  step(reads, {y}, [=](Frame& f) {
    const Tensor& in = f.slots[x];
    const std::vector<int64_t> starts = v[0].get(f).ints(), ends = v[1].get(f).ints(), axes = v[2].get(f).ints(),
                               steps = v[3].get(f).ints();
    if (!all_known) check(starts, ends, axes, steps);
    Tensor out = in;
    for (size_t i = 0; i < starts.size(); ++i) {
      const int axis = normalize_axis(axes.empty() ? static_cast<int64_t>(i) : axes[i], in.dim(), where);
      const int64_t size = in.size(axis);
      auto clamp = [size](int64_t e) { return std::clamp<int64_t>(e < 0 ? e + size : e, 0, size); };
      const int64_t b = clamp(starts[i]), e = clamp(ends[i]);
      out = engine::narrow(out, axis, b, std::max<int64_t>(0, e - b));
    }
    f.slots[y] = out;
  });
}

void Compiler::split() {
  std::vector<int64_t> sizes;
  if (opset < 13) {
    allow({"axis", "split"});
    sizes = attr_ints("split");
  } else {
    allow({"axis"});
    if (has_input(1)) sizes = known_input(1, "split").ints();
  }
  const int64_t axis = attr_int("axis", 0);
  const int x = data(0);
  std::vector<int> ys;
  for (int i = 0; i < node->output_size(); ++i) ys.push_back(output(i));
  if (!sizes.empty() && sizes.size() != ys.size())
    refuse("split " + dims_str(sizes) + " has " + std::to_string(sizes.size()) + " sizes for " +
           std::to_string(ys.size()) + " outputs");
  const std::string where = "onnx: node \"" + label + "\" (op Split)";
  step({x}, ys, [=](Frame& f) {
    const Tensor& in = f.slots[x];
    const int a = normalize_axis(axis, in.dim(), where);
    std::vector<int64_t> parts = sizes;
    if (parts.empty()) {
      const int64_t n = static_cast<int64_t>(ys.size());
      if (in.size(a) % n != 0)
        throw std::invalid_argument(where + ": dim " + std::to_string(a) + " of " + engine::shape_str(in.shape()) +
                                    " does not split into " + std::to_string(n) + " equal parts");
      parts.assign(ys.size(), in.size(a) / n);
    }
    int64_t start = 0;
    for (size_t i = 0; i < ys.size(); ++i) {
      f.slots[ys[i]] = engine::narrow(in, a, start, parts[i]);
      start += parts[i];
    }
  });
}

Program::Program(const ::onnx::ModelProto& model) {
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("onnx: the ONNX checker refuses the model: ") + e.what());
  }
  // Ranks of the values, where ONNX's shape inference finds them: the engine holds at
  // most kMaxDims dims, and a node that would make more is refused at import.
  std::map<std::string, int> rank;
  {
    ::onnx::ModelProto inferred = model;
    try {
      ::onnx::shape_inference::InferShapes(inferred);
    } catch (const std::exception&) {
      // Ranks stay unknown; the ops check their shapes when they run.
    }
    const auto& ig = inferred.graph();
    for (const auto* list : {&ig.input(), &ig.value_info(), &ig.output()})
      for (const auto& v : *list)
        if (v.type().has_tensor_type() && v.type().tensor_type().has_shape())
          rank[v.name()] = v.type().tensor_type().shape().dim_size();
  }
  Compiler c(*this);
  for (const auto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") c.opset = o.version();
  const auto& g = model.graph();

  for (const auto& t : g.initializer()) {
    Known k = read_known(t, "onnx: initializer");
    if (k.dtype == ::onnx::TensorProto::FLOAT) {
      c.init_index[t.name()] = static_cast<int>(initializers_.size());
      initializers_.push_back({t.name(), to_tensor(k), false, -1, -1, -1});
    }
    c.known[t.name()] = std::move(k);
  }
  auto shape_of = [](const ::onnx::ValueInfoProto& v) {
    Shape s;
    if (v.type().has_tensor_type() && v.type().tensor_type().has_shape())
      for (const auto& d : v.type().tensor_type().shape().dim()) s.push_back(d.has_dim_value() ? d.dim_value() : -1);
    return s;
  };
  for (const auto& in : g.input()) {
    if (c.known.count(in.name())) continue;  // an initializer listed as an input (older exporters)
    const int32_t type = in.type().has_tensor_type() ? in.type().tensor_type().elem_type() : 0;
    if (auto it = rank.find(in.name()); it != rank.end() && it->second > engine::kMaxDims)
      throw std::invalid_argument("onnx: graph input \"" + in.name() + "\" has " + std::to_string(it->second) +
                                  " dims; at most " + std::to_string(engine::kMaxDims) + " are supported");
    if (type != ::onnx::TensorProto::FLOAT)
      throw std::invalid_argument("onnx: graph input \"" + in.name() + "\" has dtype " + dtype_name(type) +
                                  "; supported: float32");
    inputs_.push_back(c.new_slot(in.name()));
    input_shapes_.push_back(shape_of(in));
  }
  int index = 0;
  for (const auto& n : g.node()) {
    c.node = &n;
    c.label = n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name();
    for (const auto& out : n.output())
      if (auto it = rank.find(out); it != rank.end() && it->second > engine::kMaxDims)
        c.refuse("output \"" + out + "\" has " + std::to_string(it->second) + " dims; at most " +
                 std::to_string(engine::kMaxDims) + " are supported");
    c.compile_node();
    ++index;
  }
  for (const auto& out : g.output()) {
    if (c.value_dtype.count(out.name()))
      throw std::invalid_argument("onnx: graph output \"" + out.name() + "\" is an " +
                                  dtype_name(c.value_dtype.at(out.name())) +
                                  " value computed from shapes; a model's outputs must be float32 tensors");
    auto it = c.slot_of.find(out.name());
    if (it == c.slot_of.end())
      throw std::invalid_argument("onnx: graph output \"" + out.name() +
                                  "\" is known at import (a constant); a model's outputs must depend on its input");
    outputs_.push_back(it->second);
    output_shapes_.push_back(shape_of(out));
  }
  // Initializers no node reads as a tensor stay out of the parameters.
  std::erase_if(initializers_, [](const Initializer& i) { return i.slot < 0; });
  // Each slot's last reader frees it; the outputs and the parameters' slots live on.
  std::vector<int> last(slot_names_.size(), -1);
  for (int s = 0; s < static_cast<int>(steps_.size()); ++s)
    for (int r : steps_[s].reads)
      if (r >= 0) last[r] = s;
  for (int o : outputs_) last[o] = -1;
  for (const Initializer& i : initializers_)
    if (i.slot >= 0) last[i.slot] = -1;
  frees_.assign(steps_.size(), {});
  for (int slot = 0; slot < num_slots(); ++slot)
    if (last[slot] >= 0) frees_[last[slot]].push_back(slot);
  for (int s = 0; s < static_cast<int>(steps_.size()); ++s)
    for (int r : steps_[s].reads)
      for (Initializer& i : initializers_)
        if (i.slot == r) {
          if (i.first_step < 0) i.first_step = s;
          i.last_step = s;
        }
}

void Program::run(Frame& frame, int begin, int end) const {
  for (int s = begin; s < end; ++s) {
    for (int slot : frees_[s]) frame.dying[slot] = 1;
    steps_[s].run(frame);
    for (int slot : frees_[s]) {
      frame.dying[slot] = 0;
      frame.slots[slot] = Tensor();
    }
  }
}

std::vector<Tensor> Program::run(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != inputs_.size())
    throw std::invalid_argument("onnx: the graph takes " + std::to_string(inputs_.size()) + " inputs, got " +
                                std::to_string(inputs.size()));
  Frame f(num_slots());
  for (size_t i = 0; i < inputs.size(); ++i) f.slots[inputs_[i]] = inputs[i];
  for (const Initializer& i : initializers_) f.slots[i.slot] = i.value.clone();
  run(f, 0, static_cast<int>(steps_.size()));
  std::vector<Tensor> out;
  for (int s : outputs_) out.push_back(f.slots[s]);
  return out;
}

}  // namespace quartet::workloads::onnx

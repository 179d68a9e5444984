#include "workloads/onnx/fold.h"

#include <onnx/defs/tensor_proto_util.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "engine/ops.h"

namespace quartet::workloads::onnx {
namespace {

using engine::Shape;
using TP = ::onnx::TensorProto;

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

// Values computed here are shapes, indices and masks: a graph that asks for more is
// refused before anything is allocated.
constexpr int64_t kMaxValues = int64_t{1} << 24;

int64_t checked_numel(const Shape& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) fail("shape " + engine::shape_str(dims) + " has a negative size");
    if (d > 0 && n > kMaxValues / d)
      fail("a value of shape " + engine::shape_str(dims) + " would hold more than " + std::to_string(kMaxValues) +
           " entries (values computed at import are shapes, indices and masks)");
    n *= d;
  }
  return n;
}

bool is_integer(int32_t dtype) { return dtype == TP::INT64 || dtype == TP::INT32 || dtype == TP::BOOL; }

Shape strides_of(const Shape& dims) {
  Shape s(dims.size(), 1);
  for (int d = static_cast<int>(dims.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * dims[d + 1];
  return s;
}

int axis_in(int64_t axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank)
    fail(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

Shape broadcast(const Shape& a, const Shape& b) { return engine::broadcast_shape(a, b); }

// k's values repeated to `out` (k's dims broadcast to it).
std::vector<double> expand_to(const Known& k, const Shape& out) {
  const size_t rank = out.size(), lead = rank - k.dims.size();
  const Shape ks = strides_of(k.dims), os = strides_of(out);
  const int64_t n = checked_numel(out);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t src = 0;
    for (size_t d = lead; d < rank; ++d)
      if (k.dims[d - lead] != 1) src += (i / os[d] % out[d]) * ks[d - lead];
    v[i] = k.values[src];
  }
  return v;
}

double to_dtype(double v, int32_t dtype) {
  if (dtype == TP::BOOL) return v != 0.0 ? 1.0 : 0.0;
  if (dtype == TP::INT64 || dtype == TP::INT32) return std::trunc(v);
  if (dtype == TP::FLOAT) return static_cast<double>(static_cast<float>(v));
  return v;
}

Known elementwise(const std::vector<const Known*>& in, int32_t dtype,
                  const std::function<double(const std::vector<double>&)>& fn) {
  Shape shape = in[0]->dims;
  for (size_t i = 1; i < in.size(); ++i) shape = broadcast(shape, in[i]->dims);
  std::vector<std::vector<double>> v;
  for (const Known* k : in) v.push_back(expand_to(*k, shape));
  Known out{dtype, shape, std::vector<double>(v[0].size())};
  std::vector<double> args(in.size());
  for (size_t e = 0; e < out.values.size(); ++e) {
    for (size_t i = 0; i < in.size(); ++i) args[i] = v[i][e];
    out.values[e] = to_dtype(fn(args), dtype);
  }
  return out;
}

const Known& arg(const std::vector<Known>& in, size_t i, const char* what) {
  if (i >= in.size() || in[i].dtype == 0) fail(std::string("input ") + std::to_string(i) + " (" + what + ") is missing");
  return in[i];
}

// A 1-D integer list (or one scalar).
std::vector<int64_t> list(const std::vector<Known>& in, size_t i, const char* what) {
  const Known& k = arg(in, i, what);
  if (!is_integer(k.dtype) || k.dims.size() > 1)
    fail(std::string(what) + " must be an integer scalar or list, got " + dtype_name(k.dtype) + " " +
         engine::shape_str(k.dims));
  return k.ints();
}

Known gather(const Known& data, const Known& idx, int64_t axis_attr) {
  if (data.dims.empty()) fail("Gather of a scalar");
  const int axis = axis_in(axis_attr, static_cast<int64_t>(data.dims.size()), "axis");
  const int64_t n = data.dims[axis];
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= data.dims[d];
  for (size_t d = axis + 1; d < data.dims.size(); ++d) inner *= data.dims[d];
  Known out{data.dtype, Shape(data.dims.begin(), data.dims.begin() + axis), {}};
  out.dims.insert(out.dims.end(), idx.dims.begin(), idx.dims.end());
  out.dims.insert(out.dims.end(), data.dims.begin() + axis + 1, data.dims.end());
  checked_numel(out.dims);
  const std::vector<int64_t> ids = idx.ints();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i : ids) {
      if (i < -n || i >= n)
        fail("index " + std::to_string(i) + " is outside [" + std::to_string(-n) + ", " + std::to_string(n) + ")");
      const int64_t r = i < 0 ? i + n : i;
      for (int64_t j = 0; j < inner; ++j) out.values.push_back(data.values[(o * n + r) * inner + j]);
    }
  return out;
}

Known concat(const std::vector<Known>& in, int64_t axis_attr) {
  if (in.empty()) fail("Concat of nothing");
  const Known& first = in[0];
  const int rank = static_cast<int>(first.dims.size());
  const int axis = axis_in(axis_attr, rank, "axis");
  Known out{first.dtype, first.dims, {}};
  out.dims[axis] = 0;
  for (const Known& k : in) {
    Shape a = k.dims, b = first.dims;
    if (static_cast<int>(a.size()) == rank) a[axis] = b[axis] = 0;
    if (a != b)
      fail("inputs " + engine::shape_str(first.dims) + " and " + engine::shape_str(k.dims) +
           " differ outside axis " + std::to_string(axis));
    out.dims[axis] += k.dims[axis];
  }
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= first.dims[d];
  for (int64_t o = 0; o < outer; ++o)
    for (const Known& k : in) {
      const int64_t chunk = engine::shape_numel(k.dims) / std::max<int64_t>(outer, 1);
      out.values.insert(out.values.end(), k.values.begin() + o * chunk, k.values.begin() + (o + 1) * chunk);
    }
  return out;
}

Known reshape(const Known& data, const std::vector<int64_t>& target) {
  Shape dims(target.begin(), target.end());
  int64_t known = 1, infer = -1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 0) {
      if (d >= data.dims.size()) fail("shape " + engine::shape_str(target) + " copies a dim the data lacks");
      dims[d] = data.dims[d];
    }
    if (dims[d] == -1) {
      if (infer >= 0) fail("shape " + engine::shape_str(target) + " has two -1");
      infer = static_cast<int64_t>(d);
    } else {
      known *= dims[d];
    }
  }
  const int64_t n = static_cast<int64_t>(data.values.size());
  if (infer >= 0) dims[infer] = known == 0 ? 0 : n / known;
  if (engine::shape_numel(dims) != n)
    fail("cannot reshape " + engine::shape_str(data.dims) + " to " + engine::shape_str(target));
  return {data.dtype, dims, data.values};
}

Known slice(const Known& data, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
            std::vector<int64_t> axes, std::vector<int64_t> steps) {
  const int64_t rank = static_cast<int64_t>(data.dims.size());
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    fail("starts, ends, axes and steps differ in length");
  Shape begin(rank, 0), step(rank, 1), dims = data.dims;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int a = axis_in(axes[i], rank, "axis");
    const int64_t size = data.dims[a], s = steps[i];
    if (s == 0) fail("a step of 0");
    auto at = [&](int64_t v, int64_t lo, int64_t hi) { return std::clamp(v < 0 ? v + size : v, lo, hi); };
    const int64_t b = s > 0 ? at(starts[i], 0, size) : at(starts[i], 0, size - 1);
    const int64_t e = s > 0 ? at(ends[i], 0, size) : at(ends[i], -1, size - 1);
    begin[a] = b;
    step[a] = s;
    dims[a] = s > 0 ? std::max<int64_t>(0, (e - b + s - 1) / s) : std::max<int64_t>(0, (b - e - s - 1) / -s);
  }
  Known out{data.dtype, dims, {}};
  const Shape in_strides = strides_of(data.dims), out_strides = strides_of(dims);
  const int64_t n = engine::shape_numel(dims);
  for (int64_t i = 0; i < n; ++i) {
    int64_t src = 0;
    for (int64_t d = 0; d < rank; ++d) src += (begin[d] + (i / out_strides[d] % dims[d]) * step[d]) * in_strides[d];
    out.values.push_back(data.values[src]);
  }
  return out;
}

Known squeeze(const Known& data, const std::vector<int64_t>& axes, bool un) {
  Shape dims = data.dims;
  if (un) {
    const int64_t rank = static_cast<int64_t>(dims.size() + axes.size());
    std::vector<int> at;
    for (int64_t a : axes) at.push_back(axis_in(a, rank, "axis"));
    std::sort(at.begin(), at.end());
    for (int a : at) dims.insert(dims.begin() + a, 1);
  } else if (axes.empty()) {
    std::erase(dims, 1);
  } else {
    std::vector<int> at;
    for (int64_t a : axes) at.push_back(axis_in(a, static_cast<int64_t>(dims.size()), "axis"));
    std::sort(at.rbegin(), at.rend());
    for (int a : at) {
      if (dims[a] != 1) fail("dim " + std::to_string(a) + " of " + engine::shape_str(data.dims) + " is not 1");
      dims.erase(dims.begin() + a);
    }
  }
  return {data.dtype, dims, data.values};
}

}  // namespace

const char* dtype_name(int32_t t) {
  switch (t) {
    case TP::FLOAT: return "float32";
    case TP::DOUBLE: return "float64";
    case TP::FLOAT16: return "float16";
    case TP::BFLOAT16: return "bfloat16";
    case TP::INT64: return "int64";
    case TP::INT32: return "int32";
    case TP::INT8: return "int8";
    case TP::UINT8: return "uint8";
    case TP::BOOL: return "bool";
    case TP::STRING: return "string";
    default: return "another type";
  }
}

Known read_known(const ::onnx::TensorProto& t, const std::string& where) {
  if (t.data_location() == TP::EXTERNAL)
    throw std::invalid_argument(where + ": tensor \"" + t.name() +
                                "\" keeps its data in an external file; save the model with its data inside");
  Known k;
  k.dtype = t.data_type();
  k.dims.assign(t.dims().begin(), t.dims().end());
  auto parse = [&](auto type) {
    try {
      const auto v = ::onnx::ParseData<decltype(type)>(&t);
      k.values.assign(v.begin(), v.end());
    } catch (const std::exception& e) {  // the library's own error: sizes that do not add up
      throw std::invalid_argument(where + ": tensor \"" + t.name() + "\" cannot be read: " + e.what());
    }
  };
  switch (t.data_type()) {
    case TP::BOOL:  // one byte each in raw_data, else in int32_data
      if (t.has_raw_data())
        for (char c : t.raw_data()) k.values.push_back(c != 0 ? 1.0 : 0.0);
      else
        for (int32_t v : t.int32_data()) k.values.push_back(v != 0 ? 1.0 : 0.0);
      break;
    case TP::FLOAT: parse(float{}); break;
    case TP::INT64: parse(int64_t{}); break;
    case TP::INT32: parse(int32_t{}); break;
    case TP::DOUBLE: parse(double{}); break;
    default:
      throw std::invalid_argument(where + ": tensor \"" + t.name() + "\" has dtype " + dtype_name(t.data_type()) +
                                  "; supported: float32, and int64, int32 or bool for values known at import");
  }
  if (static_cast<int64_t>(k.values.size()) != engine::shape_numel(k.dims))
    throw std::invalid_argument(where + ": tensor \"" + t.name() + "\" holds " + std::to_string(k.values.size()) +
                                " values for dims " + engine::shape_str(k.dims));
  return k;
}

bool is_foldable(const std::string& op) {
  static const std::set<std::string> ops = {"Add",   "Cast",  "Concat",  "ConstantOfShape", "Div",     "Equal",
                                            "Expand", "Gather", "Identity", "Mul",           "Range",   "Reshape",
                                            "Shape", "Slice", "Squeeze", "Sub",             "Unsqueeze", "Where"};
  return ops.count(op) > 0;
}

int32_t folded_dtype(const std::string& op, const FoldAttrs& attrs, const std::vector<int32_t>& inputs) {
  if (op == "Shape") return TP::INT64;
  if (op == "Equal") return TP::BOOL;
  if (op == "Cast") return attrs.to;
  if (op == "ConstantOfShape") return attrs.value.dtype != 0 ? attrs.value.dtype : TP::FLOAT;
  if (op == "Where") return inputs.size() > 1 ? inputs[1] : 0;
  return inputs.empty() ? 0 : inputs[0];
}

FoldAttrs fold_attrs(const ::onnx::NodeProto& node, int64_t opset, const std::string& where) {
  FoldAttrs at;
  at.opset = opset;
  const bool squeeze = node.op_type() == "Squeeze" || node.op_type() == "Unsqueeze";
  at.has_axes = squeeze && opset < 13;
  for (const auto& a : node.attribute()) {
    if (a.name() == "axis") at.axis = a.i();
    if (a.name() == "axes") at.axes.assign(a.ints().begin(), a.ints().end());
    if (a.name() == "start") at.start = a.i();
    if (a.name() == "end") {
      at.has_end = true;
      at.end = a.i();
    }
    if (a.name() == "to") at.to = static_cast<int32_t>(a.i());
    if (a.name() == "value" && node.op_type() == "ConstantOfShape") at.value = read_known(a.t(), where);
  }
  return at;
}

Fold make_fold(const std::string& op, const FoldAttrs& at) {
  if (op == "Shape")
    return [at](const std::vector<Known>& in) {
      const Shape& dims = arg(in, 0, "data").dims;
      const int64_t rank = static_cast<int64_t>(dims.size());
      auto clamp = [rank](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
      const int64_t b = clamp(at.start), e = at.has_end ? clamp(at.end) : rank;
      Known out{TP::INT64, {std::max<int64_t>(0, e - b)}, {}};
      for (int64_t d = b; d < e; ++d) out.values.push_back(static_cast<double>(dims[d]));
      return out;
    };
  if (op == "Gather")
    return [at](const std::vector<Known>& in) {
      const Known& idx = arg(in, 1, "indices");
      if (!is_integer(idx.dtype)) fail(std::string("indices of dtype ") + dtype_name(idx.dtype));
      return gather(arg(in, 0, "data"), idx, at.axis);
    };
  if (op == "Concat") return [at](const std::vector<Known>& in) { return concat(in, at.axis); };
  if (op == "Unsqueeze" || op == "Squeeze") {
    const bool un = op == "Unsqueeze";
    return [at, un](const std::vector<Known>& in) {
      const std::vector<int64_t> axes = at.has_axes ? at.axes : in.size() > 1 && in[1].dtype ? list(in, 1, "axes")
                                                                                             : std::vector<int64_t>{};
      if (un && axes.empty()) fail("axes are missing");
      return squeeze(arg(in, 0, "data"), axes, un);
    };
  }
  if (op == "Slice")
    return [at](const std::vector<Known>& in) {
      if (at.opset < 10) fail("Slice before opset 10 is not folded");
      auto optional = [&](size_t i, const char* what) {
        return i < in.size() && in[i].dtype != 0 ? list(in, i, what) : std::vector<int64_t>{};
      };
      return slice(arg(in, 0, "data"), list(in, 1, "starts"), list(in, 2, "ends"), optional(3, "axes"),
                   optional(4, "steps"));
    };
  if (op == "Cast")
    return [at](const std::vector<Known>& in) {
      Known out = arg(in, 0, "input");
      if (at.to != TP::FLOAT && at.to != TP::DOUBLE && !is_integer(at.to))
        fail(std::string("cast to ") + dtype_name(at.to) + " (supported: float32, float64, int64, int32, bool)");
      out.dtype = at.to;
      for (double& v : out.values) v = to_dtype(v, at.to);
      return out;
    };
  if (op == "Reshape")
    return [](const std::vector<Known>& in) { return reshape(arg(in, 0, "data"), list(in, 1, "shape")); };
  if (op == "ConstantOfShape")
    return [at](const std::vector<Known>& in) {
      const std::vector<int64_t> shape = list(in, 0, "shape");
      const Shape dims(shape.begin(), shape.end());
      const double v = at.value.values.empty() ? 0.0 : at.value.values[0];
      return Known{at.value.dtype != 0 ? at.value.dtype : TP::FLOAT, dims,
                   std::vector<double>(static_cast<size_t>(checked_numel(dims)), v)};
    };
  if (op == "Expand")
    return [](const std::vector<Known>& in) {
      const Known& data = arg(in, 0, "input");
      const std::vector<int64_t> shape = list(in, 1, "shape");
      const Shape dims = broadcast(data.dims, Shape(shape.begin(), shape.end()));
      return Known{data.dtype, dims, expand_to(data, dims)};
    };
  if (op == "Range")
    return [](const std::vector<Known>& in) {
      const double start = arg(in, 0, "start").values.at(0), limit = arg(in, 1, "limit").values.at(0),
                   delta = arg(in, 2, "delta").values.at(0);
      if (delta == 0.0) fail("delta 0");
      const double count = std::ceil((limit - start) / delta);
      if (!(count <= static_cast<double>(kMaxValues)))
        fail("a range of " + std::to_string(count) + " entries (at most " + std::to_string(kMaxValues) + ")");
      const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(count));
      Known out{in[0].dtype, {n}, {}};
      for (int64_t i = 0; i < n; ++i) out.values.push_back(to_dtype(start + static_cast<double>(i) * delta, in[0].dtype));
      return out;
    };
  if (op == "Identity") return [](const std::vector<Known>& in) { return arg(in, 0, "input"); };
  if (op == "Where")
    return [](const std::vector<Known>& in) {
      const Known &c = arg(in, 0, "condition"), &a = arg(in, 1, "X"), &b = arg(in, 2, "Y");
      return elementwise({&c, &a, &b}, a.dtype, [](const std::vector<double>& v) { return v[0] != 0.0 ? v[1] : v[2]; });
    };
  if (op == "Equal")
    return [](const std::vector<Known>& in) {
      return elementwise({&arg(in, 0, "A"), &arg(in, 1, "B")}, TP::BOOL,
                         [](const std::vector<double>& v) { return v[0] == v[1] ? 1.0 : 0.0; });
    };
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    const char kind = op[0];
    return [kind](const std::vector<Known>& in) {
      const Known &a = arg(in, 0, "A"), &b = arg(in, 1, "B");
      const bool integer = is_integer(a.dtype);
      return elementwise({&a, &b}, a.dtype, [kind, integer](const std::vector<double>& v) {
        switch (kind) {
          case 'A': return v[0] + v[1];
          case 'S': return v[0] - v[1];
          case 'M': return v[0] * v[1];
          default:
            if (integer && v[1] == 0.0) fail("integer division by zero");
            return integer ? std::trunc(v[0] / v[1]) : v[0] / v[1];
        }
      });
    };
  }
  fail("op " + op + " is not evaluated at import");
}

}  // namespace quartet::workloads::onnx

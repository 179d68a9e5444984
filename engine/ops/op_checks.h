#pragma once

// Input checks shared by the op files: every failure is a std::invalid_argument that
// starts with the op's name and carries the shapes involved.

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace quartet::engine::detail {

[[noreturn]] inline void fail(const char* op, const std::string& message) {
  throw std::invalid_argument(std::string(op) + ": " + message);
}

// A float as a person writes it: 0.5, 1, nan (std::to_string gives 1.000000).
inline std::string float_str(float v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// Per spatial dim, indexed by the number of spatial dims (1 to 3).
inline constexpr const char* kDimNames[4][3] = {{}, {"W"}, {"H", "W"}, {"D", "H", "W"}};

// One value per spatial dim: a single value is repeated; each must be >= min_value.
// `context` names the tensors, so the message says what the option was applied to.
inline std::vector<int64_t> per_dim(const std::vector<int64_t>& values, int spatial, const char* op,
                                    const char* field, int64_t min_value, const std::string& context) {
  if (values.size() != 1 && values.size() != static_cast<size_t>(spatial))
    fail(op, std::string(field) + " expects 1 or " + std::to_string(spatial) + " values, got " +
                 std::to_string(values.size()) + ": " + shape_str(values) + " (" + context + ")");
  for (int64_t v : values)
    if (v < min_value)
      fail(op, std::string(field) + " expects values >= " + std::to_string(min_value) + ", got " +
                   shape_str(values) + " (" + context + ")");
  return values.size() == 1 ? std::vector<int64_t>(spatial, values[0]) : values;
}

// The number of spatial dims of x: (N, C, *spatial) with 1 to 3 spatial dims.
inline int spatial_dims(const Tensor& x, const char* op) {
  if (!x.defined()) fail(op, "input must be a defined tensor");
  const int spatial = x.dim() - 2;
  if (spatial < 1 || spatial > 3)
    fail(op, "input (N, C, *spatial) with 1 to 3 spatial dims expected, got " + shape_str(x.shape()));
  return spatial;
}

// requires t undefined or a vector (size) on x's device; `what` names it ("weight"),
// `dim` the size's letter in the message (C: channels, F: features).
inline void check_channel_vector(const Tensor& t, int64_t size, const Tensor& x, const char* op,
                                 const char* what, const char* dim = "C") {
  if (!t.defined()) return;
  if (t.dim() != 1 || t.size(0) != size)
    fail(op, std::string(what) + " (" + dim + ") = (" + std::to_string(size) + ") expected, got " +
                 shape_str(t.shape()) + " (input " + shape_str(x.shape()) + ")");
  if (!(t.device() == x.device()))
    fail(op, std::string(what) + " is on " + t.device().str() + " but the input on " + x.device().str());
}

// q, k, v of one shape (B, T, H * Dh), no size zero, on one device; heads >= 1 dividing
// the last dim (engine/ops/transformer.cpp). `op` names the op in the message.
void check_attention_inputs(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, const char* op);

}  // namespace quartet::engine::detail

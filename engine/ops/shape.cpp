#include <stdexcept>

#include "engine/autograd.h"
#include "engine/ops.h"

namespace quartet::engine {

Tensor reshape(const Tensor& x, Shape shape) {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw std::invalid_argument("reshape: more than one -1 in " + shape_str(shape));
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw std::invalid_argument("reshape: negative size in " + shape_str(shape));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known != 0)
      throw std::invalid_argument("reshape: cannot view " + shape_str(x.shape()) + " as " + shape_str(shape));
    shape[infer] = x.numel() / known;
  }
  if (shape_numel(shape) != x.numel())
    throw std::invalid_argument("reshape: " + shape_str(x.shape()) + " has " + std::to_string(x.numel()) +
                                " elements, " + shape_str(shape) + " has " +
                                std::to_string(shape_numel(shape)));
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw std::invalid_argument("reshape: " + shape_str(shape) + " has more than " +
                                std::to_string(kMaxDims) + " dimensions");
  Tensor out = x.detach();
  out.impl()->shape = shape;
  record(out, "reshape", {x}, [in_shape = x.shape()](const Tensor& g) {
    Tensor d = g.detach();
    d.impl()->shape = in_shape;
    return TensorList{d};
  });
  return out;
}

Tensor flatten(const Tensor& x, int start_dim) {
  const int n = x.dim();
  if (start_dim < 0 || start_dim >= n)
    throw std::invalid_argument("flatten: start_dim " + std::to_string(start_dim) + " out of range for shape " +
                                shape_str(x.shape()));
  Shape shape(x.shape().begin(), x.shape().begin() + start_dim);
  int64_t rest = 1;
  for (int i = start_dim; i < n; ++i) rest *= x.shape()[i];
  shape.push_back(rest);
  return reshape(x, shape);
}

}  // namespace quartet::engine

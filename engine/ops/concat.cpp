#include <string>

#include "engine/autograd.h"
#include "engine/cpu/concat.h"
#include "engine/dispatch.h"
#include "engine/ops.h"
#include "engine/ops/op_checks.h"

namespace quartet::engine {

Tensor concat(const TensorList& xs, int dim) {
  using detail::fail;
  if (xs.empty()) fail("concat", "needs at least one tensor, got none");
  for (size_t i = 0; i < xs.size(); ++i)
    if (!xs[i].defined()) fail("concat", "input " + std::to_string(i) + " is an undefined tensor");
  const Tensor& first = xs[0];
  const int rank = first.dim();
  if (dim < -rank || dim >= rank)
    fail("concat", "dim " + std::to_string(dim) + " out of range for input 0 " + shape_str(first.shape()));
  if (dim < 0) dim += rank;

  Shape out_shape = first.shape();
  out_shape[dim] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    bool agree = x.dim() == rank;
    for (int d = 0; agree && d < rank; ++d) agree = d == dim || x.size(d) == first.size(d);
    if (!agree)
      fail("concat", "input " + std::to_string(i) + " " + shape_str(x.shape()) + " does not match input 0 " +
                         shape_str(first.shape()) + " outside dim " + std::to_string(dim));
    if (!(x.device() == first.device()))
      fail("concat", "input " + std::to_string(i) + " is on " + x.device().str() + ", input 0 on " +
                         first.device().str());
    out_shape[dim] += x.size(dim);
  }

  Tensor out = Tensor::empty(out_shape, first.device());
  QUARTET_DISPATCH(first.device(), concat, xs, dim, out);
  std::vector<bool> wants(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) wants[i] = xs[i].requires_grad();
  Shape sizes;  // each input's size along dim
  for (const Tensor& x : xs) sizes.push_back(x.size(dim));
  record(out, "concat", xs, [wants, sizes, dim](const Tensor& g) {
    TensorList grads(sizes.size());
    int64_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (wants[i]) {
        Shape shape = g.shape();
        shape[dim] = sizes[i];
        grads[i] = Tensor::empty(shape, g.device());
        QUARTET_DISPATCH(g.device(), concat_slice, g, dim, offset, grads[i]);
      }
      offset += sizes[i];
    }
    return grads;
  });
  return out;
}

}  // namespace quartet::engine

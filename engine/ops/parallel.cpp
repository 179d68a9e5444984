#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/ops/op_checks.h"

namespace quartet::engine {

Tensor all_reduce_backward(const Tensor& x, StatsReducer& group) {
  if (!x.defined()) detail::fail("all_reduce_backward", "input must be a defined tensor");
  Tensor out = x.detach();
  record(out, "all_reduce_backward", {x}, [&group](const Tensor& g) {
    Tensor sum = g.clone();  // g may be shared with other consumers of the gradient
    group.all_reduce_sum(sum);
    return TensorList{sum};
  });
  return out;
}

Tensor all_reduce_forward(const Tensor& x, StatsReducer& group) {
  if (!x.defined()) detail::fail("all_reduce_forward", "input must be a defined tensor");
  Tensor out = x.clone();
  group.all_reduce_sum(out);
  record(out, "all_reduce_forward", {x}, [](const Tensor& g) { return TensorList{g}; });
  return out;
}

}  // namespace quartet::engine

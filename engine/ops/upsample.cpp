#include <string>

#include "engine/autograd.h"
#include "engine/cpu/upsample.h"
#include "engine/dispatch.h"
#include "engine/ops.h"
#include "engine/ops/op_checks.h"

namespace quartet::engine {

Tensor upsample(const Tensor& x, const std::vector<int64_t>& scale, UpsampleMode mode) {
  const int spatial = detail::spatial_dims(x, "upsample");
  const std::string input = "input " + shape_str(x.shape());
  if (mode != UpsampleMode::nearest && mode != UpsampleMode::linear)
    detail::fail("upsample", "mode must be nearest or linear, got " + std::to_string(static_cast<int>(mode)) +
                                 " (" + input + ")");
  const std::vector<int64_t> s = detail::per_dim(scale, spatial, "upsample", "scale", 1, input);
  Shape out_shape{x.size(0), x.size(1)};
  for (int i = 0; i < spatial; ++i) {
    if (x.size(2 + i) < 1) detail::fail("upsample", input + " has a zero spatial size");
    out_shape.push_back(x.size(2 + i) * s[i]);
  }
  Tensor out = Tensor::empty(out_shape, x.device());
  QUARTET_DISPATCH(x.device(), upsample_forward, x, mode, out);
  record(out, "upsample", {x}, [mode, x_shape = x.shape()](const Tensor& g) {
    Tensor dx = Tensor::empty(x_shape, g.device());
    QUARTET_DISPATCH(g.device(), upsample_backward, g, mode, dx);
    return TensorList{dx};
  });
  return out;
}

}  // namespace quartet::engine

#include <cmath>
#include <string>

#include "engine/autograd.h"
#include "engine/cpu/activation.h"
#include "engine/cpu/elementwise.h"
#include "engine/dispatch.h"
#include "engine/ops.h"
#include "engine/ops/op_checks.h"

namespace quartet::engine {
namespace {

void check_defined(const Tensor& x, const char* op) {
  if (!x.defined()) detail::fail(op, "input must be a defined tensor");
}

}  // namespace

Tensor leaky_relu(const Tensor& x, float negative_slope) {
  check_defined(x, "leaky_relu");
  if (!std::isfinite(negative_slope))
    detail::fail("leaky_relu", "negative_slope must be finite, got " + detail::float_str(negative_slope) +
                                   " (input " + shape_str(x.shape()) + ")");
  Tensor out = Tensor::empty(x.shape(), x.device());
  QUARTET_DISPATCH(x.device(), leaky_relu, x, negative_slope, out);
  // The input, not the output, decides the branch: a negative slope flips signs.
  record(out, "leaky_relu", {x}, [x = x.detach(), negative_slope](const Tensor& g) {
    Tensor d = Tensor::empty(g.shape(), g.device());
    QUARTET_DISPATCH(g.device(), leaky_relu_backward, g, x, negative_slope, d);
    return TensorList{d};
  });
  return out;
}

Tensor sigmoid(const Tensor& x) {
  check_defined(x, "sigmoid");
  Tensor out = Tensor::empty(x.shape(), x.device());
  QUARTET_DISPATCH(x.device(), sigmoid, x, out);
  record(out, "sigmoid", {x}, [y = out.detach()](const Tensor& g) {
    Tensor d = Tensor::empty(g.shape(), g.device());
    QUARTET_DISPATCH(g.device(), sigmoid_backward, g, y, d);
    return TensorList{d};
  });
  return out;
}

Tensor tanh(const Tensor& x) {
  check_defined(x, "tanh");
  Tensor out = Tensor::empty(x.shape(), x.device());
  QUARTET_DISPATCH(x.device(), tanh, x, out);
  record(out, "tanh", {x}, [y = out.detach()](const Tensor& g) {
    Tensor d = Tensor::empty(g.shape(), g.device());
    QUARTET_DISPATCH(g.device(), tanh_backward, g, y, d);
    return TensorList{d};
  });
  return out;
}

Tensor erf(const Tensor& x) {
  check_defined(x, "erf");
  Tensor out = Tensor::empty(x.shape(), x.device());
  QUARTET_DISPATCH(x.device(), erf, x, out);
  record(out, "erf", {x}, [x = x.detach()](const Tensor& g) {
    Tensor d = Tensor::empty(g.shape(), g.device());
    QUARTET_DISPATCH(g.device(), erf_backward, g, x, d);
    return TensorList{d};
  });
  return out;
}

Tensor dropout(const Tensor& x, float p, Generator& gen) {
  check_defined(x, "dropout");
  if (!(p >= 0.0f && p < 1.0f))
    detail::fail("dropout", "p must be in [0, 1), got " + detail::float_str(p) + " (input " +
                                shape_str(x.shape()) + ")");
  if (p == 0.0f) return x;  // no draws either: p = 0 leaves the generator where it was
  Tensor out = Tensor::empty(x.shape(), x.device());
  // The mask is saved for backward; without one coming it is scratch.
  Tensor mask = needs_grad({&x}) ? Tensor::empty(x.shape(), x.device())
                                 : Tensor::empty(x.shape(), x.device(), MemTag::workspace);
  QUARTET_DISPATCH(x.device(), dropout, x, p, gen, mask, out);
  record(out, "dropout", {x}, [mask](const Tensor& g) {
    Tensor d = Tensor::empty(g.shape(), g.device());
    QUARTET_DISPATCH(g.device(), mul, g, mask, d);
    return TensorList{d};
  });
  return out;
}

}  // namespace quartet::engine

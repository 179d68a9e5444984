#include <stdexcept>

#include "engine/autograd.h"
#include "engine/cpu/dense.h"
#include "engine/dispatch.h"
#include "engine/ops.h"

namespace quartet::engine {

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (a.dim() != 2 || b.dim() != 2 || a.size(1) != b.size(0))
    throw std::invalid_argument("matmul: expected (M, K) x (K, N), got " + shape_str(a.shape()) + " x " +
                                shape_str(b.shape()));
  Tensor out = Tensor::empty({a.size(0), b.size(1)}, a.device());
  QUARTET_DISPATCH(a.device(), gemm, a, false, b, false, out, 1.0f, 0.0f);
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  record(out, "matmul", {a, b}, [a = a.detach(), b = b.detach(), ga, gb](const Tensor& g) {
    Tensor da, db;
    if (ga) {  // dA = G B^T
      da = Tensor::empty(a.shape(), g.device());
      QUARTET_DISPATCH(g.device(), gemm, g, false, b, true, da, 1.0f, 0.0f);
    }
    if (gb) {  // dB = A^T G
      db = Tensor::empty(b.shape(), g.device());
      QUARTET_DISPATCH(g.device(), gemm, a, true, g, false, db, 1.0f, 0.0f);
    }
    return TensorList{da, db};
  });
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (x.dim() != 2 || weight.dim() != 2 || x.size(1) != weight.size(1))
    throw std::invalid_argument("linear: input " + shape_str(x.shape()) + " does not fit weight " +
                                shape_str(weight.shape()) + " (expected input (N, in), weight (out, in))");
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0)))
    throw std::invalid_argument("linear: bias " + shape_str(bias.shape()) + " does not fit weight " +
                                shape_str(weight.shape()) + " (expected (out))");
  Tensor out = Tensor::empty({x.size(0), weight.size(0)}, x.device());
  QUARTET_DISPATCH(x.device(), gemm, x, false, weight, true, out, 1.0f, 0.0f);
  if (bias.defined()) QUARTET_DISPATCH(x.device(), add_row_bias, out, bias);
  const bool gx = x.requires_grad(), gw = weight.requires_grad();
  const bool gbias = bias.defined() && bias.requires_grad();
  record(out, "linear", {x, weight, bias},
         [x = x.detach(), w = weight.detach(), bshape = bias.defined() ? bias.shape() : Shape{}, gx, gw,
          gbias](const Tensor& g) {
           Tensor dx, dw, db;
           if (gx) {  // dX = G W
             dx = Tensor::empty(x.shape(), g.device());
             QUARTET_DISPATCH(g.device(), gemm, g, false, w, false, dx, 1.0f, 0.0f);
           }
           if (gw) {  // dW = G^T X
             dw = Tensor::empty(w.shape(), g.device());
             QUARTET_DISPATCH(g.device(), gemm, g, true, x, false, dw, 1.0f, 0.0f);
           }
           if (gbias) {
             db = Tensor::empty(bshape, g.device());
             QUARTET_DISPATCH(g.device(), sum_rows, g, db);
           }
           return TensorList{dx, dw, db};
         });
  return out;
}

}  // namespace quartet::engine

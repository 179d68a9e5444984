#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/cpu/moe.h"
#include "engine/dispatch.h"
#include "engine/ops.h"
#include "engine/ops/op_checks.h"

namespace quartet::engine {
namespace {

using detail::fail;

void check_matrix(const Tensor& x, const char* op, const char* what, const char* dims) {
  if (!x.defined()) fail(op, std::string(what) + " must be a defined tensor");
  if (x.dim() != 2 || x.numel() == 0)
    fail(op, std::string(what) + " " + dims + " with no zero size expected, got " + shape_str(x.shape()));
}

// Whole numbers as floats on `device`: what the kernels read an index from.
Tensor index_tensor(const std::vector<int32_t>& values, const Device& device) {
  const std::vector<float> f(values.begin(), values.end());
  return Tensor::from_vector({static_cast<int64_t>(f.size())}, f).to(device);
}

}  // namespace

Tensor softmax(const Tensor& x) {
  const char* op = "softmax";
  if (!x.defined()) fail(op, "input must be a defined tensor");
  if (x.dim() < 1 || x.numel() == 0) fail(op, "input (..., F) with no zero size expected, got " + shape_str(x.shape()));
  Tensor out = Tensor::empty(x.shape(), x.device());
  QUARTET_DISPATCH(x.device(), softmax, x, out);
  record(out, op, {x}, [p = out.detach()](const Tensor& g) {
    Tensor d = Tensor::empty(g.shape(), g.device());
    QUARTET_DISPATCH(g.device(), softmax_backward, g, p, d);
    return TensorList{d};
  });
  return out;
}

Tensor logsumexp(const Tensor& x) {
  const char* op = "logsumexp";
  if (!x.defined()) fail(op, "input must be a defined tensor");
  if (x.dim() < 1 || x.numel() == 0) fail(op, "input (..., F) with no zero size expected, got " + shape_str(x.shape()));
  Shape rows = x.shape();
  rows.pop_back();
  if (rows.empty()) rows.push_back(1);
  Tensor out = Tensor::empty(rows, x.device());
  QUARTET_DISPATCH(x.device(), logsumexp, x, out);
  record(out, op, {x}, [x = x.detach(), lse = out.detach()](const Tensor& g) {
    Tensor d = Tensor::empty(x.shape(), g.device());
    QUARTET_DISPATCH(g.device(), logsumexp_backward, g, x, lse, d);
    return TensorList{d};
  });
  return out;
}

TopKGates top_k_gates(const Tensor& probs, int64_t k, bool normalize) {
  const char* op = "top_k_gates";
  check_matrix(probs, op, "probs", "(R, E)");
  if (k < 1 || k > probs.size(1))
    fail(op, "k must be in [1, " + std::to_string(probs.size(1)) + "] (the experts), got " + std::to_string(k));
  const Device dev = probs.device();
  Tensor experts = Tensor::empty({probs.size(0), k}, dev), gates = Tensor::empty({probs.size(0), k}, dev);
  QUARTET_DISPATCH(dev, top_k_gates, probs, k, normalize, experts, gates);
  record(gates, op, {probs},
         [p = probs.detach(), experts, g = gates.detach(), normalize](const Tensor& grad) {
           Tensor d = Tensor::empty(p.shape(), grad.device());
           QUARTET_DISPATCH(grad.device(), top_k_gates_backward, grad, p, experts, g, normalize, d);
           return TensorList{d};
         });
  TopKGates out{gates, {}};
  for (float e : experts.to_vector()) out.experts.push_back(static_cast<int32_t>(e));
  return out;
}

Tensor gather_rows(const Tensor& x, const std::vector<int32_t>& rows) {
  check_matrix(x, "gather_rows", "input", "(R, F)");
  if (rows.empty()) fail("gather_rows", "no rows to gather from input " + shape_str(x.shape()));
  // The rows of x an index picks are what an embedding looks up: one kernel for both.
  return embedding(index_tensor(rows, x.device()), x);
}

Tensor combine_rows(const Tensor& y, const Tensor& gates, const std::vector<int32_t>& slots) {
  const char* op = "combine_rows";
  check_matrix(gates, op, "gates", "(R, K)");
  const int64_t rows = gates.size(0), k = gates.size(1);
  if (!y.defined() || y.dim() != 2 || y.size(1) < 1)
    fail(op, "y (S, F) expected, got " + (y.defined() ? shape_str(y.shape()) : std::string("undefined")));
  if (!(y.device() == gates.device()))
    fail(op, "y is on " + y.device().str() + " but gates on " + gates.device().str());
  if (static_cast<int64_t>(slots.size()) != rows * k)
    fail(op, "slots must hold R * K = " + std::to_string(rows * k) + " entries (gates " + shape_str(gates.shape()) +
                 "), got " + std::to_string(slots.size()));
  std::vector<char> used(static_cast<size_t>(y.size(0)), 0);
  for (size_t i = 0; i < slots.size(); ++i) {
    const int32_t s = slots[i];
    if (s == -1) continue;
    if (s < 0 || s >= y.size(0) || used[static_cast<size_t>(s)])
      fail(op, "slot " + std::to_string(s) + " at position " + std::to_string(i) + " is not -1 or a row of y " +
                   shape_str(y.shape()) + " no other position names");
    used[static_cast<size_t>(s)] = 1;
  }
  const Device dev = y.device();
  const Tensor where = reshape(index_tensor(slots, dev), {rows, k});
  Tensor out = Tensor::empty({rows, y.size(1)}, dev);
  QUARTET_DISPATCH(dev, combine_rows, y, gates, where, out);
  const bool gy = y.requires_grad(), gg = gates.requires_grad();
  record(out, op, {y, gates},
         [y = y.detach(), g = gates.detach(), where, gy, gg](const Tensor& grad) {
           Tensor dy, dg;
           if (gy) dy = Tensor::empty(y.shape(), grad.device());
           if (gg) dg = Tensor::empty(g.shape(), grad.device());
           QUARTET_DISPATCH(grad.device(), combine_rows_backward, grad, y, g, where, dy, dg);
           return TensorList{dy, dg};
         });
  return out;
}

Tensor add_side_loss(const Tensor& x, const Tensor& loss) {
  const char* op = "add_side_loss";
  if (!x.defined() || !loss.defined()) fail(op, "x and loss must be defined tensors");
  if (loss.numel() != 1) fail(op, "loss must be a scalar (one element), got " + shape_str(loss.shape()));
  Tensor out = x.detach();
  record(out, op, {x, loss}, [shape = loss.shape()](const Tensor& g) {
    return TensorList{g, Tensor::full(shape, side_loss_weight(), g.device())};
  });
  return out;
}

}  // namespace quartet::engine

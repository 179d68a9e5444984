#include <cmath>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/cpu/transformer.h"
#include "engine/dispatch.h"
#include "engine/ops.h"
#include "engine/ops/op_checks.h"

namespace quartet::engine {
namespace {

using detail::fail;

void check_defined(const Tensor& x, const char* op, const char* what) {
  if (!x.defined()) fail(op, std::string(what) + " must be a defined tensor");
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op, const char* what_a, const char* what_b) {
  if (!(a.device() == b.device()))
    fail(op, std::string(what_a) + " is on " + a.device().str() + " but " + what_b + " on " + b.device().str());
}

// Every index a whole number in [0, rows). Reads the values on the host (a device
// tensor is copied back): a bad index would read or write outside weight.
void check_indices(const Tensor& indices, const Tensor& weight) {
  const int64_t rows = weight.size(0);
  const std::vector<float> values = indices.to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    if (v == std::floor(v) && v >= 0.0f && v < static_cast<float>(rows)) continue;
    fail("embedding", "index " + detail::float_str(v) + " at position " + std::to_string(i) +
                          " is not a whole number in [0, " + std::to_string(rows) + ") (indices " +
                          shape_str(indices.shape()) + ", weight " + shape_str(weight.shape()) + ")");
  }
}

}  // namespace

namespace detail {

void check_attention_inputs(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, const char* op) {
  check_defined(q, op, "q");
  check_defined(k, op, "k");
  check_defined(v, op, "v");
  if (q.dim() != 3 || q.numel() == 0)
    fail(op, "q (B, T, H * Dh) with no zero size expected, got " + shape_str(q.shape()));
  if (k.shape() != q.shape() || v.shape() != q.shape())
    fail(op, "q, k and v must have one shape, got q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) +
                 ", v " + shape_str(v.shape()));
  check_same_device(k, q, op, "k", "q");
  check_same_device(v, q, op, "v", "q");
  if (heads < 1 || q.size(2) % heads != 0)
    fail(op, "heads must be >= 1 and divide the last dim " + std::to_string(q.size(2)) + ", got heads " +
                 std::to_string(heads) + " (q " + shape_str(q.shape()) + ")");
}

}  // namespace detail

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  const char* op = "embedding";
  check_defined(indices, op, "indices");
  check_defined(weight, op, "weight");
  if (weight.dim() != 2 || weight.numel() == 0)
    fail(op, "weight (rows, F) with no zero size expected, got " + shape_str(weight.shape()));
  check_same_device(indices, weight, op, "indices", "weight");
  check_indices(indices, weight);

  Shape shape = indices.shape();
  shape.push_back(weight.size(1));
  Tensor out = Tensor::empty(shape, weight.device());
  QUARTET_DISPATCH(weight.device(), embedding, indices, weight, out);
  // No gradient to the indices: they only pick rows.
  record(out, op, {weight}, [indices = indices.detach(), rows = weight.size(0)](const Tensor& g) {
    Tensor dw = Tensor::empty({rows, g.size(-1)}, g.device());
    QUARTET_DISPATCH(g.device(), embedding_backward, g, indices, dw);
    return TensorList{dw};
  });
  return out;
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  const char* op = "layer_norm";
  check_defined(x, op, "input");
  if (x.dim() < 1 || x.numel() == 0) fail(op, "input (..., F) with no zero size expected, got " + shape_str(x.shape()));
  const int64_t features = x.size(-1);
  detail::check_channel_vector(weight, features, x, op, "weight", "F");
  detail::check_channel_vector(bias, features, x, op, "bias", "F");
  if (!(eps >= 0.0f) || !std::isfinite(eps))
    fail(op, "eps must be finite and >= 0, got " + detail::float_str(eps) + " (input " + shape_str(x.shape()) + ")");

  const Device dev = x.device();
  const int64_t rows = x.numel() / features;
  Tensor out = Tensor::empty(x.shape(), dev);
  Tensor mean = Tensor::empty({rows}, dev), rstd = Tensor::empty({rows}, dev);
  QUARTET_DISPATCH(dev, layer_norm_forward, x, weight, bias, eps, out, mean, rstd);
  const bool gx = x.requires_grad(), gw = weight.defined() && weight.requires_grad(),
             gb = bias.defined() && bias.requires_grad();
  record(out, op, {x, weight, bias},
         [x = x.detach(), w = weight.defined() ? weight.detach() : Tensor(), mean, rstd, gx, gw,
          gb](const Tensor& g) {
           const int64_t f = x.size(-1);
           Tensor dx, dw, db;
           if (gx) dx = Tensor::empty(x.shape(), g.device());
           if (gw) dw = Tensor::empty({f}, g.device());
           if (gb) db = Tensor::empty({f}, g.device());
           QUARTET_DISPATCH(g.device(), layer_norm_backward, g, x, mean, rstd, w, dx, dw, db);
           return TensorList{dx, dw, db};
         });
  return out;
}

Tensor gelu(const Tensor& x) {
  check_defined(x, "gelu", "input");
  Tensor out = Tensor::empty(x.shape(), x.device());
  QUARTET_DISPATCH(x.device(), gelu, x, out);
  record(out, "gelu", {x}, [x = x.detach()](const Tensor& g) {
    Tensor d = Tensor::empty(g.shape(), g.device());
    QUARTET_DISPATCH(g.device(), gelu_backward, g, x, d);
    return TensorList{d};
  });
  return out;
}

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads) {
  detail::check_attention_inputs(q, k, v, heads, "causal_attention");
  const Device dev = q.device();
  Tensor out = Tensor::empty(q.shape(), dev);
  Tensor lse = Tensor::empty({q.size(0), heads, q.size(1)}, dev);
  QUARTET_DISPATCH(dev, causal_attention_forward, q, k, v, heads, out, lse);
  record(out, "causal_attention", {q, k, v},
         [q = q.detach(), k = k.detach(), v = v.detach(), o = out.detach(), lse, heads](const Tensor& g) {
           Tensor dq = Tensor::empty(q.shape(), g.device()), dk = Tensor::empty(q.shape(), g.device()),
                  dv = Tensor::empty(q.shape(), g.device());
           QUARTET_DISPATCH(g.device(), causal_attention_backward, g, q, k, v, o, lse, heads, dq, dk, dv);
           return TensorList{dq, dk, dv};
         });
  return out;
}

}  // namespace quartet::engine

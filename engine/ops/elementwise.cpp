#include <stdexcept>

#include "engine/autograd.h"
#include "engine/cpu/elementwise.h"
#include "engine/dispatch.h"
#include "engine/ops.h"
#include "engine/ops/broadcast.h"

namespace quartet::engine {
namespace {

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  if (!(a.device() == b.device()))
    throw std::invalid_argument(std::string(op) + ": inputs on different devices: " +
                                a.device().str() + " and " + b.device().str());
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  if (a.defined() && b.defined() && a.shape() != b.shape())
    return detail::broadcast_binary(cuda::BinaryKind::add, a, b, "add");
  check_same_shape(a, b, "add");
  check_same_device(a, b, "add");
  Tensor out = Tensor::empty(a.shape(), a.device());
  QUARTET_DISPATCH(a.device(), add, a, b, out);
  record(out, "add", {a, b}, [](const Tensor& g) { return TensorList{g, g}; });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  if (a.defined() && b.defined() && a.shape() != b.shape())
    return detail::broadcast_binary(cuda::BinaryKind::mul, a, b, "mul");
  check_same_shape(a, b, "mul");
  check_same_device(a, b, "mul");
  Tensor out = Tensor::empty(a.shape(), a.device());
  QUARTET_DISPATCH(a.device(), mul, a, b, out);
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  record(out, "mul", {a, b}, [a = a.detach(), b = b.detach(), ga, gb](const Tensor& g) {
    Tensor da, db;
    if (ga) {
      da = Tensor::empty(g.shape(), g.device());
      QUARTET_DISPATCH(g.device(), mul, g, b, da);
    }
    if (gb) {
      db = Tensor::empty(g.shape(), g.device());
      QUARTET_DISPATCH(g.device(), mul, g, a, db);
    }
    return TensorList{da, db};
  });
  return out;
}

Tensor scale(const Tensor& a, float s) {
  Tensor out = Tensor::empty(a.shape(), a.device());
  QUARTET_DISPATCH(a.device(), scale, a, s, out);
  record(out, "scale", {a}, [s](const Tensor& g) {
    Tensor d = Tensor::empty(g.shape(), g.device());
    QUARTET_DISPATCH(g.device(), scale, g, s, d);
    return TensorList{d};
  });
  return out;
}

namespace {

// out = relu(x); out may share x's storage.
Tensor relu_into(const Tensor& x, Tensor out) {
  // Backward needs only where the output is positive: one bit an element, not the
  // output itself, which is then freed as soon as the next layer is done with it (global
  // average pooling keeps nothing of it, max pooling its indices).
  Tensor mask;
  if (needs_grad({&x})) mask = Tensor::empty({cpu::relu_mask_words(x.numel())}, x.device());
  QUARTET_DISPATCH(x.device(), relu, x, out, mask);
  record(out, "relu", {x}, [mask](const Tensor& g) {
    // The incoming gradient is overwritten when nothing else can see it (backward holds
    // the only handle and the handle the only reference to the storage): one activation-
    // sized buffer less at the peak of backward.
    const bool reuse = g.impl_ptr().use_count() == 1 && g.impl()->storage.use_count() == 1;
    Tensor d = reuse ? g : Tensor::empty(g.shape(), g.device());
    QUARTET_DISPATCH(g.device(), relu_backward, g, mask, d);
    return TensorList{d};
  });
  return out;
}

}  // namespace

Tensor relu(const Tensor& x) { return relu_into(x, Tensor::empty(x.shape(), x.device())); }

Tensor relu_reusing(Tensor x) {
  const bool sole = x.defined() && x.impl_ptr().use_count() == 1 && x.impl()->storage.use_count() == 1;
  // A handle of its own on the same storage: x keeps its place in the graph as relu's input.
  return sole ? relu_into(x, x.detach()) : relu(x);
}

namespace {

Tensor reduce_to_scalar(const Tensor& x, float factor, const char* name) {
  Tensor out = Tensor::empty({1}, x.device());
  out.fill_(factor * QUARTET_DISPATCH(x.device(), sum, x));
  record(out, name, {x}, [shape = x.shape(), factor](const Tensor& g) {
    Tensor d = Tensor::empty(shape, g.device());
    QUARTET_DISPATCH(g.device(), fill_from_scalar, g, factor, d);
    return TensorList{d};
  });
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce_to_scalar(x, 1.0f, "sum"); }

Tensor mean(const Tensor& x) {
  if (x.numel() == 0) throw std::invalid_argument("mean: empty tensor of shape " + shape_str(x.shape()));
  return reduce_to_scalar(x, 1.0f / static_cast<float>(x.numel()), "mean");
}

}  // namespace quartet::engine

namespace quartet::engine {
namespace {

void check_range(const Tensor& t, int64_t offset, int64_t count, const char* op) {
  if (offset < 0 || count < 0 || offset > t.numel() || count > t.numel() - offset)
    throw std::invalid_argument(std::string(op) + ": range [" + std::to_string(offset) + ", " +
                                std::to_string(offset + count) + ") outside a tensor of " +
                                std::to_string(t.numel()) + " values");
}

}  // namespace

void copy_range(Tensor& dst, int64_t dst_offset, const Tensor& src, int64_t src_offset, int64_t count) {
  check_same_device(dst, src, "copy_range");
  check_range(dst, dst_offset, count, "copy_range");
  check_range(src, src_offset, count, "copy_range");
  QUARTET_DISPATCH(dst.device(), copy_range, dst, dst_offset, src, src_offset, count);
}

void fill_range(Tensor& t, int64_t offset, int64_t count, float value) {
  check_range(t, offset, count, "fill_range");
  QUARTET_DISPATCH(t.device(), fill_range, t, offset, count, value);
}

void round_to_half_(Tensor& t, int64_t offset, int64_t count) {
  check_range(t, offset, count, "round_to_half_");
  QUARTET_DISPATCH(t.device(), round_to_half, t, offset, count);
}

double sum_squares(const Tensor& t) { return QUARTET_DISPATCH(t.device(), sum_squares, t); }

void scale_(Tensor& t, float s) { QUARTET_DISPATCH(t.device(), scale, t, s, t); }

}  // namespace quartet::engine

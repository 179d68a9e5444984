#include "engine/ops/broadcast.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "engine/autograd.h"
#include "engine/cpu/broadcast.h"
#include "engine/cpu/elementwise.h"
#include "engine/dispatch.h"
#include "engine/ops.h"
#include "engine/ops/op_checks.h"

namespace quartet::engine {
namespace {

using cuda::BinaryKind;
using cuda::kStridedDims;
using cuda::PadMap;
using cuda::StridedMap;

// shape with leading ones up to kStridedDims sizes.
Shape padded(const Shape& shape) {
  Shape p(kStridedDims - shape.size(), 1);
  p.insert(p.end(), shape.begin(), shape.end());
  return p;
}

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

void check_rank(const Shape& shape, const char* op) {
  if (shape.size() > static_cast<size_t>(kMaxDims))
    detail::fail(op, shape_str(shape) + " has more than " + std::to_string(kMaxDims) + " dimensions");
}

// Reads `in` (broadcastable to out) at out's element i.
StridedMap broadcast_map(const Shape& in, const Shape& out) {
  const Shape pi = padded(in), po = padded(out), stride = contiguous_strides(pi);
  StridedMap m{};
  for (int d = 0; d < kStridedDims; ++d) {
    m.size[d] = po[d];
    m.stride[d] = pi[d] == 1 ? 0 : stride[d];
  }
  return m;
}

// g (full) summed over the dims where `shape` (broadcastable to full's) has size 1.
Tensor reduce_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const Shape pf = padded(g.shape()), ps = padded(shape), stride = contiguous_strides(pf);
  StridedMap outer{}, inner{};
  int64_t count = 1;
  for (int d = 0; d < kStridedDims; ++d) {
    const bool summed = ps[d] != pf[d];
    outer.size[d] = ps[d];
    outer.stride[d] = summed ? 0 : stride[d];
    inner.size[d] = summed ? pf[d] : 1;
    inner.stride[d] = stride[d];
    count *= inner.size[d];
  }
  Tensor out = Tensor::empty(shape, g.device());
  QUARTET_DISPATCH(g.device(), strided_sum, g, outer, inner, count, out);
  return out;
}

Tensor binary_kernel(BinaryKind kind, const Tensor& a, const Tensor& b, const Shape& shape) {
  Tensor out = Tensor::empty(shape, a.device());
  QUARTET_DISPATCH(a.device(), broadcast_binary, kind, a, broadcast_map(a.shape(), shape), b,
                   broadcast_map(b.shape(), shape), out);
  return out;
}

Tensor where_kernel(const Tensor& c, const Tensor& a, const Tensor& b, const Shape& shape) {
  Tensor out = Tensor::empty(shape, a.device());
  QUARTET_DISPATCH(a.device(), where, c, broadcast_map(c.shape(), shape), a, broadcast_map(a.shape(), shape), b,
                   broadcast_map(b.shape(), shape), out);
  return out;
}

}  // namespace

Shape broadcast_shape(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t sa = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t sb = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (sa != sb && sa != 1 && sb != 1)
      throw std::invalid_argument("broadcast: shapes " + shape_str(a) + " and " + shape_str(b) +
                                  " do not broadcast (each size must match or be 1, aligned at the last dim)");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

namespace detail {

Tensor broadcast_binary(BinaryKind kind, const Tensor& a, const Tensor& b, const char* op) {
  if (!a.defined() || !b.defined()) fail(op, "inputs must be defined tensors");
  if (!(a.device() == b.device()))
    fail(op, "inputs on different devices: " + a.device().str() + " and " + b.device().str());
  Shape shape;
  try {
    shape = broadcast_shape(a.shape(), b.shape());
  } catch (const std::invalid_argument& e) {
    fail(op, e.what());
  }
  check_rank(shape, op);
  Tensor out = binary_kernel(kind, a, b, shape);
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  record(out, op, {a, b}, [kind, a = a.detach(), b = b.detach(), y = out.detach(), ga, gb](const Tensor& g) {
    Tensor da, db;
    const Shape& full = g.shape();
    switch (kind) {
      case BinaryKind::add:
      case BinaryKind::sub:
        if (ga) da = reduce_to(g, a.shape());
        if (gb) {
          db = reduce_to(g, b.shape());
          if (kind == BinaryKind::sub) {
            if (db.same(g)) db = g.clone();
            QUARTET_DISPATCH(db.device(), scale, db, -1.0f, db);
          }
        }
        break;
      case BinaryKind::mul:
        if (ga) da = reduce_to(binary_kernel(BinaryKind::mul, g, b, full), a.shape());
        if (gb) db = reduce_to(binary_kernel(BinaryKind::mul, g, a, full), b.shape());
        break;
      case BinaryKind::div:  // d(a/b)/db = -(a/b)/b
        if (ga) da = reduce_to(binary_kernel(BinaryKind::div, g, b, full), a.shape());
        if (gb) {
          Tensor t = binary_kernel(BinaryKind::div, binary_kernel(BinaryKind::mul, g, y, full), b, full);
          db = reduce_to(t, b.shape());
          QUARTET_DISPATCH(db.device(), scale, db, -1.0f, db);
        }
        break;
    }
    return TensorList{da, db};
  });
  return out;
}

}  // namespace detail

Tensor sub(const Tensor& a, const Tensor& b) { return detail::broadcast_binary(BinaryKind::sub, a, b, "sub"); }
Tensor div(const Tensor& a, const Tensor& b) { return detail::broadcast_binary(BinaryKind::div, a, b, "div"); }

Tensor expand(const Tensor& x, const Shape& shape) {
  if (!x.defined()) detail::fail("expand", "input must be a defined tensor");
  check_rank(shape, "expand");
  Shape target;
  try {
    target = broadcast_shape(x.shape(), shape);
  } catch (const std::invalid_argument& e) {
    detail::fail("expand", e.what());
  }
  if (target != shape)
    detail::fail("expand", "cannot expand " + shape_str(x.shape()) + " to " + shape_str(shape));
  if (x.shape() == shape) return x;
  Tensor out = Tensor::empty(shape, x.device());
  QUARTET_DISPATCH(x.device(), strided_copy, x, broadcast_map(x.shape(), shape), out);
  record(out, "expand", {x}, [in = x.shape()](const Tensor& g) { return TensorList{reduce_to(g, in)}; });
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (!x.defined()) detail::fail("sum_to", "input must be a defined tensor");
  check_rank(x.shape(), "sum_to");
  bool fits = shape.size() <= x.shape().size();
  for (size_t i = 0; fits && i < shape.size(); ++i) {
    const int64_t s = shape[shape.size() - 1 - i], full = x.shape()[x.shape().size() - 1 - i];
    fits = s == full || s == 1;
  }
  if (!fits) detail::fail("sum_to", "cannot sum " + shape_str(x.shape()) + " to " + shape_str(shape) +
                                        " (each size must match or be 1, aligned at the last dim)");
  if (x.shape() == shape) return x;
  Tensor out = reduce_to(x, shape);
  record(out, "sum_to", {x}, [full = x.shape()](const Tensor& g) {
    Tensor d = Tensor::empty(full, g.device());
    QUARTET_DISPATCH(g.device(), strided_copy, g, broadcast_map(g.shape(), full), d);
    return TensorList{d};
  });
  return out;
}

Tensor transpose(const Tensor& x, const std::vector<int>& perm) {
  if (!x.defined()) detail::fail("transpose", "input must be a defined tensor");
  const int rank = x.dim();
  std::vector<int> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> iota(rank);
  std::iota(iota.begin(), iota.end(), 0);
  if (sorted != iota) {
    std::string p;
    for (int v : perm) p += (p.empty() ? "" : ", ") + std::to_string(v);
    detail::fail("transpose", "perm (" + p + ") is no permutation of the " + std::to_string(rank) +
                                  " dims of " + shape_str(x.shape()));
  }
  check_rank(x.shape(), "transpose");
  Shape shape(rank);
  const Shape stride = contiguous_strides(x.shape());
  StridedMap m{};
  const int lead = kStridedDims - rank;
  for (int d = 0; d < lead; ++d) m.size[d] = 1;
  for (int d = 0; d < rank; ++d) {
    shape[d] = x.size(perm[d]);
    m.size[lead + d] = shape[d];
    m.stride[lead + d] = stride[perm[d]];
  }
  Tensor out = Tensor::empty(shape, x.device());
  QUARTET_DISPATCH(x.device(), strided_copy, x, m, out);
  std::vector<int> inverse(rank);
  for (int d = 0; d < rank; ++d) inverse[perm[d]] = d;
  record(out, "transpose", {x}, [inverse](const Tensor& g) {
    NoGradScope no_grad;
    return TensorList{transpose(g, inverse)};
  });
  return out;
}

Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length) {
  if (!x.defined()) detail::fail("narrow", "input must be a defined tensor");
  const int rank = x.dim();
  if (dim < 0 || dim >= rank)
    detail::fail("narrow", "dim " + std::to_string(dim) + " out of range for " + shape_str(x.shape()));
  if (start < 0 || length < 0 || start + length > x.size(dim))
    detail::fail("narrow", "range " + shape_str({start, start + length}) + " outside dim " + std::to_string(dim) +
                               " of " + shape_str(x.shape()));
  check_rank(x.shape(), "narrow");
  Shape shape = x.shape();
  shape[dim] = length;
  const int lead = kStridedDims - rank;
  const Shape stride = contiguous_strides(padded(x.shape())), po = padded(shape);
  StridedMap m{};
  for (int d = 0; d < kStridedDims; ++d) {
    m.size[d] = po[d];
    m.stride[d] = stride[d];
  }
  m.base = start * stride[lead + dim];
  Tensor out = Tensor::empty(shape, x.device());
  QUARTET_DISPATCH(x.device(), strided_copy, x, m, out);
  std::vector<int64_t> begin(rank, 0), end(rank, 0);
  begin[dim] = start;
  end[dim] = x.size(dim) - start - length;
  record(out, "narrow", {x}, [begin, end](const Tensor& g) {
    NoGradScope no_grad;
    return TensorList{pad(g, begin, end, 0.0f)};
  });
  return out;
}

Tensor batched_matmul(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.dim() < 2 || b.dim() < 2 || a.size(-1) != b.size(-2))
    detail::fail("batched_matmul", "expected (..., M, K) x (..., K, N), got " +
                                       (a.defined() ? shape_str(a.shape()) : std::string("undefined")) + " x " +
                                       (b.defined() ? shape_str(b.shape()) : std::string("undefined")));
  if (!(a.device() == b.device()))
    detail::fail("batched_matmul", "inputs on different devices: " + a.device().str() + " and " + b.device().str());
  if (a.dim() == 2 && b.dim() == 2) return matmul(a, b);
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Shape batch;
  try {
    batch = broadcast_shape(Shape(a.shape().begin(), a.shape().end() - 2),
                            Shape(b.shape().begin(), b.shape().end() - 2));
  } catch (const std::invalid_argument& e) {
    detail::fail("batched_matmul", std::string("batch dims: ") + e.what());
  }
  const int64_t count = shape_numel(batch);
  auto widen = [&](const Tensor& t, int64_t r, int64_t c) {
    Shape full = batch;
    full.push_back(r);
    full.push_back(c);
    return reshape(expand(t, full), {count, r, c});
  };
  Tensor a3 = widen(a, m, k), b3 = widen(b, k, n);
  Tensor out = Tensor::empty({count, m, n}, a.device());
  QUARTET_DISPATCH(a.device(), batched_gemm, a3, false, b3, false, out);
  const bool ga = a3.requires_grad(), gb = b3.requires_grad();
  record(out, "batched_matmul", {a3, b3}, [a3 = a3.detach(), b3 = b3.detach(), ga, gb](const Tensor& g) {
    Tensor da, db;
    if (ga) {  // dA = G B^T
      da = Tensor::empty(a3.shape(), g.device());
      QUARTET_DISPATCH(g.device(), batched_gemm, g, false, b3, true, da);
    }
    if (gb) {  // dB = A^T G
      db = Tensor::empty(b3.shape(), g.device());
      QUARTET_DISPATCH(g.device(), batched_gemm, a3, true, g, false, db);
    }
    return TensorList{da, db};
  });
  Shape shape = batch;
  shape.push_back(m);
  shape.push_back(n);
  return reshape(out, shape);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const char* op = "where";
  if (!cond.defined() || !a.defined() || !b.defined()) detail::fail(op, "inputs must be defined tensors");
  if (!(cond.device() == a.device()) || !(b.device() == a.device()))
    detail::fail(op, "inputs on different devices: " + cond.device().str() + ", " + a.device().str() + " and " +
                         b.device().str());
  Shape shape;
  try {
    shape = broadcast_shape(broadcast_shape(cond.shape(), a.shape()), b.shape());
  } catch (const std::invalid_argument&) {
    detail::fail(op, "cond " + shape_str(cond.shape()) + ", a " + shape_str(a.shape()) + " and b " +
                         shape_str(b.shape()) + " do not broadcast (each size must match or be 1, aligned at the last dim)");
  }
  check_rank(shape, op);
  Tensor out = where_kernel(cond, a, b, shape);
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  record(out, op, {a, b}, [c = cond.detach(), sa = a.shape(), sb = b.shape(), ga, gb](const Tensor& g) {
    // The gradient where a branch was chosen, zero elsewhere: the forward's kernel again.
    const Tensor zero = Tensor::zeros({1}, g.device());
    Tensor da, db;
    if (ga) da = reduce_to(where_kernel(c, g, zero, g.shape()), sa);
    if (gb) db = reduce_to(where_kernel(c, zero, g, g.shape()), sb);
    return TensorList{da, db};
  });
  return out;
}

Tensor gather(const Tensor& x, int axis, const std::vector<int64_t>& indices, const Shape& index_shape) {
  const char* op = "gather";
  if (!x.defined()) detail::fail(op, "input must be a defined tensor");
  if (axis < 0 || axis >= x.dim())
    detail::fail(op, "axis " + std::to_string(axis) + " out of range for " + shape_str(x.shape()));
  if (indices.empty() || static_cast<int64_t>(indices.size()) != shape_numel(index_shape))
    detail::fail(op, "expects at least one index and as many as index shape " + shape_str(index_shape) +
                         " holds, got " + std::to_string(indices.size()));
  if (x.numel() == 0) detail::fail(op, "input " + shape_str(x.shape()) + " has no entries");
  const int64_t n = x.size(axis), k = static_cast<int64_t>(indices.size());
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= x.size(d);
  if (outer * n > (int64_t{1} << 24))
    detail::fail(op, "input " + shape_str(x.shape()) + " has more than 2^24 rows up to axis " + std::to_string(axis));
  // Row (o, j) of the result is row o * n + indices[j] of x as (outer * n, inner): what
  // an embedding looks up, so its kernels (and their summed gradient) serve.
  std::vector<float> rows;
  rows.reserve(static_cast<size_t>(outer * k));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = indices[j];
      if (i < -n || i >= n)
        detail::fail(op, "index " + std::to_string(i) + " at position " + std::to_string(j) + " is outside [" +
                             std::to_string(-n) + ", " + std::to_string(n) + ") (input " + shape_str(x.shape()) +
                             ", axis " + std::to_string(axis) + ")");
      rows.push_back(static_cast<float>(o * n + (i < 0 ? i + n : i)));
    }
  const Tensor picked = embedding(Tensor::from_vector({outer * k}, rows).to(x.device()),
                                  reshape(x, {outer * n, x.numel() / (outer * n)}));
  Shape shape(x.shape().begin(), x.shape().begin() + axis);
  shape.insert(shape.end(), index_shape.begin(), index_shape.end());
  shape.insert(shape.end(), x.shape().begin() + axis + 1, x.shape().end());
  check_rank(shape, op);
  return reshape(picked, shape);
}

Tensor clip(const Tensor& x, float lo, float hi) {
  if (!x.defined()) detail::fail("clip", "input must be a defined tensor");
  if (!(lo <= hi))
    detail::fail("clip", "min " + detail::float_str(lo) + " must be <= max " + detail::float_str(hi));
  Tensor out = Tensor::empty(x.shape(), x.device());
  QUARTET_DISPATCH(x.device(), clip, x, lo, hi, out);
  record(out, "clip", {x}, [x = x.detach(), lo, hi](const Tensor& g) {
    Tensor d = Tensor::empty(g.shape(), g.device());
    QUARTET_DISPATCH(g.device(), clip_backward, g, x, lo, hi, d);
    return TensorList{d};
  });
  return out;
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& begin, const std::vector<int64_t>& end, float value) {
  if (!x.defined()) detail::fail("pad", "input must be a defined tensor");
  const int rank = x.dim();
  if (begin.size() != static_cast<size_t>(rank) || end.size() != static_cast<size_t>(rank))
    detail::fail("pad", "expects " + std::to_string(rank) + " begin and end sizes for " + shape_str(x.shape()) +
                            ", got " + shape_str(begin) + " and " + shape_str(end));
  for (int d = 0; d < rank; ++d)
    if (begin[d] < 0 || end[d] < 0)
      detail::fail("pad", "sizes must be >= 0, got " + shape_str(begin) + " and " + shape_str(end));
  check_rank(x.shape(), "pad");
  Shape shape(rank);
  for (int d = 0; d < rank; ++d) shape[d] = x.size(d) + begin[d] + end[d];
  const Shape px = padded(x.shape()), po = padded(shape), sx = contiguous_strides(px), so = contiguous_strides(po);
  const int lead = kStridedDims - rank;
  PadMap pm{};
  StridedMap crop{};
  for (int d = 0; d < kStridedDims; ++d) {
    const int64_t b = d < lead ? 0 : begin[d - lead];
    pm.size[d] = po[d];
    pm.begin[d] = b;
    pm.in_size[d] = px[d];
    pm.in_stride[d] = sx[d];
    crop.size[d] = px[d];
    crop.stride[d] = so[d];
    crop.base += b * so[d];
  }
  Tensor out = Tensor::empty(shape, x.device());
  QUARTET_DISPATCH(x.device(), pad, x, pm, value, out);
  record(out, "pad", {x}, [crop, in = x.shape()](const Tensor& g) {
    Tensor d = Tensor::empty(in, g.device());
    QUARTET_DISPATCH(g.device(), strided_copy, g, crop, d);
    return TensorList{d};
  });
  return out;
}

}  // namespace quartet::engine

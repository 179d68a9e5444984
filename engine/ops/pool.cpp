#include <string>

#include "engine/autograd.h"
#include "engine/cpu/pool.h"
#include "engine/dispatch.h"
#include "engine/ops.h"
#include "engine/ops/op_checks.h"

namespace quartet::engine {
namespace {

using detail::fail;
using detail::per_dim;

// Indexed by the number of spatial dims.
constexpr const char* kMaxPoolNames[] = {"max_pool", "max_pool1d", "max_pool2d", "max_pool3d"};
constexpr const char* kAvgPoolNames[] = {"avg_pool", "avg_pool1d", "avg_pool2d", "avg_pool3d"};

// Argmax offsets are stored as floats, exact below 2^24.
constexpr int64_t kMaxWindowCells = int64_t{1} << 24;

// Checks the options against x and fills `opt` with one value per spatial dim;
// returns the output shape (N, C, *out).
Shape pool_geometry(const Tensor& x, const PoolOptions& options, int spatial, const char* op,
                    PoolOptions& opt) {
  const std::string input = "input " + shape_str(x.shape());
  opt.kernel = per_dim(options.kernel, spatial, op, "kernel", 1, input);
  opt.stride = options.stride.empty() ? opt.kernel : per_dim(options.stride, spatial, op, "stride", 1, input);
  opt.padding = per_dim(options.padding, spatial, op, "padding", 0, input);

  int64_t cells = 1;
  Shape out_shape{x.size(0), x.size(1)};
  for (int i = 0; i < spatial; ++i) {
    // Padding past half the kernel would give windows with no real cell.
    if (2 * opt.padding[i] > opt.kernel[i])
      fail(op, "padding " + shape_str(opt.padding) + " must be at most half the kernel " +
                   shape_str(opt.kernel) + " (" + input + ")");
    cells *= opt.kernel[i];
    if (cells >= kMaxWindowCells)
      fail(op, "kernel " + shape_str(opt.kernel) + " has more than 2^24 cells (" + input + ")");
    const int64_t span = x.size(2 + i) + 2 * opt.padding[i] - opt.kernel[i];
    if (span < 0)
      fail(op, "output size along " + std::string(detail::kDimNames[spatial][i]) + " would be < 1: " + input +
                   ", kernel " + shape_str(opt.kernel) + ", padding " + shape_str(opt.padding));
    out_shape.push_back(span / opt.stride[i] + 1);
  }
  return out_shape;
}

Tensor max_pool_nd(const Tensor& x, const PoolOptions& options, int spatial) {
  PoolOptions opt;
  const Shape out_shape = pool_geometry(x, options, spatial, kMaxPoolNames[spatial], opt);
  Tensor out = Tensor::empty(out_shape, x.device());
  // Winners are kept only for a backward pass.
  Tensor argmax = needs_grad({&x}) ? Tensor::empty(out_shape, x.device()) : Tensor();
  QUARTET_DISPATCH(x.device(), max_pool_forward, x, opt, out, argmax);
  record(out, kMaxPoolNames[spatial], {x}, [argmax, opt, x_shape = x.shape()](const Tensor& g) {
    Tensor dx = Tensor::empty(x_shape, g.device());
    QUARTET_DISPATCH(g.device(), max_pool_backward, g, argmax, opt, dx);
    return TensorList{dx};
  });
  return out;
}

}  // namespace

Tensor max_pool(const Tensor& x, const PoolOptions& opt) {
  return max_pool_nd(x, opt, detail::spatial_dims(x, "max_pool"));
}

Tensor max_pool2d(const Tensor& x, const PoolOptions& opt) {
  if (!x.defined()) fail("max_pool2d", "input must be a defined tensor");
  if (x.dim() != 4) fail("max_pool2d", "input (N, C, H, W) expected, got " + shape_str(x.shape()));
  return max_pool_nd(x, opt, 2);
}

Tensor avg_pool(const Tensor& x, const PoolOptions& options) {
  const int spatial = detail::spatial_dims(x, "avg_pool");
  const char* op = kAvgPoolNames[spatial];
  PoolOptions opt;
  Tensor out = Tensor::empty(pool_geometry(x, options, spatial, op, opt), x.device());
  QUARTET_DISPATCH(x.device(), avg_pool_forward, x, opt, out);
  record(out, op, {x}, [opt, x_shape = x.shape()](const Tensor& g) {
    Tensor dx = Tensor::empty(x_shape, g.device());
    QUARTET_DISPATCH(g.device(), avg_pool_backward, g, opt, dx);
    return TensorList{dx};
  });
  return out;
}

Tensor global_avg_pool(const Tensor& x) {
  detail::spatial_dims(x, "global_avg_pool");
  for (int64_t s : x.shape())
    if (s < 1) fail("global_avg_pool", "input " + shape_str(x.shape()) + " has a zero size");
  Tensor out = Tensor::empty({x.size(0), x.size(1)}, x.device());
  QUARTET_DISPATCH(x.device(), global_avg_pool_forward, x, out);
  record(out, "global_avg_pool", {x}, [x_shape = x.shape()](const Tensor& g) {
    Tensor dx = Tensor::empty(x_shape, g.device());
    QUARTET_DISPATCH(g.device(), global_avg_pool_backward, g, dx);
    return TensorList{dx};
  });
  return out;
}

}  // namespace quartet::engine

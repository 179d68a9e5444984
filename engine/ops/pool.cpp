#include <stdexcept>
#include <string>

#include "engine/autograd.h"
#include "engine/cpu/pool.h"
#include "engine/dispatch.h"
#include "engine/ops.h"

namespace quartet::engine {
namespace {

// Indexed by the number of spatial dims.
constexpr const char* kPoolNames[] = {"max_pool", "max_pool1d", "max_pool2d", "max_pool3d"};
constexpr const char* kDimNames[4][3] = {{}, {"W"}, {"H", "W"}, {"D", "H", "W"}};

// Argmax offsets are stored as floats, exact below 2^24.
constexpr int64_t kMaxWindowCells = int64_t{1} << 24;

[[noreturn]] void fail(const char* op, const std::string& message) {
  throw std::invalid_argument(std::string(op) + ": " + message);
}

// One value per spatial dim: a single value is repeated; each must be >= min_value.
// `context` names the tensors, so the message says what the option was applied to.
std::vector<int64_t> per_dim(const std::vector<int64_t>& values, int spatial, const char* op,
                             const char* field, int64_t min_value, const std::string& context) {
  if (values.size() != 1 && values.size() != static_cast<size_t>(spatial))
    fail(op, std::string(field) + " expects 1 or " + std::to_string(spatial) + " values, got " +
                 std::to_string(values.size()) + ": " + shape_str(values) + " (" + context + ")");
  for (int64_t v : values)
    if (v < min_value)
      fail(op, std::string(field) + " expects values >= " + std::to_string(min_value) + ", got " +
                   shape_str(values) + " (" + context + ")");
  return values.size() == 1 ? std::vector<int64_t>(spatial, values[0]) : values;
}

Tensor max_pool_nd(const Tensor& x, const PoolOptions& options, int spatial) {
  const char* op = kPoolNames[spatial];
  const std::string input = "input " + shape_str(x.shape());
  PoolOptions opt;
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
      fail(op, "output size along " + std::string(kDimNames[spatial][i]) + " would be < 1: " + input +
                   ", kernel " + shape_str(opt.kernel) + ", padding " + shape_str(opt.padding));
    out_shape.push_back(span / opt.stride[i] + 1);
  }

  Tensor out = Tensor::empty(out_shape, x.device());
  // Winners are kept only for a backward pass.
  Tensor argmax = needs_grad({&x}) ? Tensor::empty(out_shape, x.device()) : Tensor();
  QUARTET_DISPATCH(x.device(), max_pool_forward, x, opt, out, argmax);
  record(out, op, {x}, [argmax, opt, x_shape = x.shape()](const Tensor& g) {
    Tensor dx = Tensor::empty(x_shape, g.device());
    QUARTET_DISPATCH(g.device(), max_pool_backward, g, argmax, opt, dx);
    return TensorList{dx};
  });
  return out;
}

}  // namespace

Tensor max_pool(const Tensor& x, const PoolOptions& opt) {
  if (!x.defined()) fail("max_pool", "input must be a defined tensor");
  const int spatial = x.dim() - 2;
  if (spatial < 1 || spatial > 3)
    fail("max_pool", "input (N, C, *spatial) with 1 to 3 spatial dims expected, got " + shape_str(x.shape()));
  return max_pool_nd(x, opt, spatial);
}

Tensor max_pool2d(const Tensor& x, const PoolOptions& opt) {
  if (!x.defined()) fail("max_pool2d", "input must be a defined tensor");
  if (x.dim() != 4) fail("max_pool2d", "input (N, C, H, W) expected, got " + shape_str(x.shape()));
  return max_pool_nd(x, opt, 2);
}

}  // namespace quartet::engine

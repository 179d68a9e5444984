#include <string>

#include "engine/autograd.h"
#include "engine/cpu/conv.h"
#include "engine/dispatch.h"
#include "engine/ops.h"
#include "engine/ops/op_checks.h"

namespace quartet::engine {
namespace {

using detail::fail;
using detail::per_dim;

// Indexed by the number of spatial dims.
constexpr const char* kNames[] = {"conv_transpose", "conv_transpose1d", "conv_transpose2d",
                                  "conv_transpose3d"};
constexpr const char* kWeightLayouts[] = {"", "(Cin, Cout, kW)", "(Cin, Cout, kH, kW)",
                                          "(Cin, Cout, kD, kH, kW)"};

Tensor conv_transpose_nd(const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const ConvTransposeOptions& options, int spatial) {
  const char* op = kNames[spatial];
  const std::string shapes = "input " + shape_str(x.shape()) + ", weight " + shape_str(weight.shape());
  if (weight.dim() != spatial + 2)
    fail(op, std::string("weight ") + kWeightLayouts[spatial] + " expected, got " +
                 shape_str(weight.shape()) + " (input " + shape_str(x.shape()) + ")");
  for (int64_t s : weight.shape())
    if (s < 1)
      fail(op,
           "weight " + shape_str(weight.shape()) + " has a zero size; Cin, Cout and the kernel must be >= 1");
  if (x.size(1) != weight.size(0))
    fail(op, "input " + shape_str(x.shape()) + " has " + std::to_string(x.size(1)) + " channels but weight " +
                 shape_str(weight.shape()) + " expects Cin = " + std::to_string(weight.size(0)));
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(1)))
    fail(op, "bias (Cout) = (" + std::to_string(weight.size(1)) + ") expected, got " +
                 shape_str(bias.shape()) + " (weight " + shape_str(weight.shape()) + ")");
  if (!(x.device() == weight.device()) || (bias.defined() && !(bias.device() == x.device())))
    fail(op, "input, weight and bias must be on one device; input is on " + x.device().str() +
                 ", weight on " + weight.device().str() +
                 (bias.defined() ? ", bias on " + bias.device().str() : ""));

  ConvTransposeOptions opt;
  opt.stride = per_dim(options.stride, spatial, op, "stride", 1, shapes);
  opt.padding = per_dim(options.padding, spatial, op, "padding", 0, shapes);
  opt.output_padding = per_dim(options.output_padding, spatial, op, "output_padding", 0, shapes);
  opt.dilation = per_dim(options.dilation, spatial, op, "dilation", 1, shapes);

  Shape out_shape{x.size(0), weight.size(1)};
  for (int i = 0; i < spatial; ++i) {
    // Larger output padding would add cells that no input position reaches.
    if (opt.output_padding[i] >= opt.stride[i] && opt.output_padding[i] >= opt.dilation[i])
      fail(op, "output_padding " + shape_str(opt.output_padding) + " must be smaller than the stride " +
                   shape_str(opt.stride) + " or the dilation " + shape_str(opt.dilation) + " (" + shapes +
                   ")");
    const int64_t size = (x.size(2 + i) - 1) * opt.stride[i] - 2 * opt.padding[i] +
                         opt.dilation[i] * (weight.size(2 + i) - 1) + opt.output_padding[i] + 1;
    if (size < 1)
      fail(op, "output size along " + std::string(detail::kDimNames[spatial][i]) + " would be " +
                   std::to_string(size) + " < 1: " + shapes + ", padding " + shape_str(opt.padding));
    out_shape.push_back(size);
  }

  Tensor out = Tensor::empty(out_shape, x.device());
  QUARTET_DISPATCH(x.device(), conv_transpose_forward, x, weight, bias, opt, out);
  const bool gx = x.requires_grad(), gw = weight.requires_grad();
  const bool gb = bias.defined() && bias.requires_grad();
  record(out, op, {x, weight, bias}, [x = x.detach(), w = weight.detach(), opt, gx, gw, gb](const Tensor& g) {
    Tensor dx, dw, db;
    if (gx) dx = Tensor::empty(x.shape(), g.device());
    if (gw) dw = Tensor::empty(w.shape(), g.device());
    if (gb) db = Tensor::empty({w.size(1)}, g.device());
    QUARTET_DISPATCH(g.device(), conv_transpose_backward, x, w, g, opt, dx, dw, db);
    return TensorList{dx, dw, db};
  });
  return out;
}

void check_defined(const Tensor& x, const Tensor& weight, const char* op) {
  if (!x.defined() || !weight.defined()) fail(op, "input and weight must be defined tensors");
}

}  // namespace

Tensor conv_transpose(const Tensor& x, const Tensor& weight, const Tensor& bias,
                      const ConvTransposeOptions& opt) {
  check_defined(x, weight, "conv_transpose");
  return conv_transpose_nd(x, weight, bias, opt, detail::spatial_dims(x, "conv_transpose"));
}

Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const ConvTransposeOptions& opt) {
  check_defined(x, weight, "conv_transpose3d");
  if (x.dim() != 5) fail("conv_transpose3d", "input (N, C, D, H, W) expected, got " + shape_str(x.shape()));
  return conv_transpose_nd(x, weight, bias, opt, 3);
}

}  // namespace quartet::engine

#include <stdexcept>
#include <string>

#include "engine/autograd.h"
#include "engine/cpu/conv.h"
#include "engine/dispatch.h"
#include "engine/ops.h"
#include "engine/ops/op_checks.h"

namespace quartet::engine {

using detail::fail;
using detail::kDimNames;
using detail::per_dim;

namespace {

// Indexed by the number of spatial dims.
constexpr const char* kConvNames[] = {"conv", "conv1d", "conv2d", "conv3d"};
constexpr const char* kInputLayouts[] = {"", "(N, C, W)", "(N, C, H, W)", "(N, C, D, H, W)"};
constexpr const char* kWeightLayouts[] = {"", "(Cout, Cin, kW)", "(Cout, Cin, kH, kW)",
                                          "(Cout, Cin, kD, kH, kW)"};

Tensor conv_nd(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& options,
               int spatial) {
  const char* op = kConvNames[spatial];
  const std::string shapes = "input " + shape_str(x.shape()) + ", weight " + shape_str(weight.shape());
  if (weight.dim() != spatial + 2)
    fail(op, std::string("weight ") + kWeightLayouts[spatial] + " expected, got " +
                 shape_str(weight.shape()) + " (input " + shape_str(x.shape()) + ")");
  for (int64_t s : weight.shape())
    if (s < 1)
      fail(op, "weight " + shape_str(weight.shape()) +
                   " has a zero size; Cout, Cin and the kernel must be >= 1");
  if (x.size(1) != weight.size(1))
    fail(op, "input " + shape_str(x.shape()) + " has " + std::to_string(x.size(1)) +
                 " channels but weight " + shape_str(weight.shape()) + " expects Cin = " +
                 std::to_string(weight.size(1)));
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0)))
    fail(op, "bias (Cout) = (" + std::to_string(weight.size(0)) + ") expected, got " +
                 shape_str(bias.shape()) + " (weight " + shape_str(weight.shape()) + ")");
  if (!(x.device() == weight.device()) || (bias.defined() && !(bias.device() == x.device())))
    fail(op, "input, weight and bias must be on one device; input is on " + x.device().str() +
                 ", weight on " + weight.device().str() +
                 (bias.defined() ? ", bias on " + bias.device().str() : ""));

  ConvOptions opt;
  opt.stride = per_dim(options.stride, spatial, op, "stride", 1, shapes);
  opt.padding = per_dim(options.padding, spatial, op, "padding", 0, shapes);
  opt.dilation = per_dim(options.dilation, spatial, op, "dilation", 1, shapes);

  Shape out_shape{x.size(0), weight.size(0)};
  for (int i = 0; i < spatial; ++i) {
    const int64_t span = x.size(2 + i) + 2 * opt.padding[i] - opt.dilation[i] * (weight.size(2 + i) - 1);
    if (span < 1)
      fail(op, "output size along " + std::string(kDimNames[spatial][i]) + " would be < 1: " + shapes +
                   ", padding " + shape_str(opt.padding) + ", dilation " + shape_str(opt.dilation) +
                   " (the padded input is smaller than the dilated kernel)");
    out_shape.push_back((span - 1) / opt.stride[i] + 1);
  }

  Tensor out = Tensor::empty(out_shape, x.device());
  QUARTET_DISPATCH(x.device(), conv_forward, x, weight, bias, opt, out);
  const bool gx = x.requires_grad(), gw = weight.requires_grad();
  const bool gb = bias.defined() && bias.requires_grad();
  record(out, op, {x, weight, bias},
         [x = x.detach(), w = weight.detach(), opt, gx, gw, gb](const Tensor& g) {
           Tensor dx, dw, db;
           if (gx) dx = Tensor::empty(x.shape(), g.device());
           if (gw) dw = Tensor::empty(w.shape(), g.device());
           if (gb) db = Tensor::empty({w.size(0)}, g.device());
           QUARTET_DISPATCH(g.device(), conv_backward, x, w, g, opt, dx, dw, db);
           return TensorList{dx, dw, db};
         });
  return out;
}

void check_defined(const Tensor& x, const Tensor& weight, const char* op) {
  if (!x.defined() || !weight.defined()) fail(op, "input and weight must be defined tensors");
}

}  // namespace

Tensor conv(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt) {
  check_defined(x, weight, "conv");
  const int spatial = x.dim() - 2;
  if (spatial < 1 || spatial > 3)
    fail("conv", "input (N, C, *spatial) with 1 to 3 spatial dims expected, got " + shape_str(x.shape()));
  return conv_nd(x, weight, bias, opt, spatial);
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt) {
  check_defined(x, weight, "conv2d");
  if (x.dim() != 4)
    fail("conv2d", std::string("input ") + kInputLayouts[2] + " expected, got " + shape_str(x.shape()));
  return conv_nd(x, weight, bias, opt, 2);
}

Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& opt) {
  check_defined(x, weight, "conv3d");
  if (x.dim() != 5)
    fail("conv3d", std::string("input ") + kInputLayouts[3] + " expected, got " + shape_str(x.shape()));
  return conv_nd(x, weight, bias, opt, 3);
}

}  // namespace quartet::engine

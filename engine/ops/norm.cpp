#include <cmath>
#include <string>

#include "engine/autograd.h"
#include "engine/cpu/norm.h"
#include "engine/dispatch.h"
#include "engine/ops.h"
#include "engine/ops/op_checks.h"

namespace quartet::engine {
namespace {

using detail::fail;

// x: (N, C) or (N, C, *spatial) with up to three spatial dims.
void check_input(const Tensor& x, const char* op) {
  if (!x.defined()) fail(op, "input must be a defined tensor");
  if (x.dim() < 2 || x.dim() > 5)
    fail(op, "input (N, C, *spatial) with 0 to 3 spatial dims expected, got " + shape_str(x.shape()));
  if (x.numel() == 0) fail(op, "input " + shape_str(x.shape()) + " is empty");
}

void check_eps(float eps, const Tensor& x, const char* op) {
  if (!(eps >= 0.0f) || !std::isfinite(eps))
    fail(op, "eps must be finite and >= 0, got " + detail::float_str(eps) + " (input " +
                 shape_str(x.shape()) + ")");
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, const BatchNormOptions& opt) {
  const char* op = "batch_norm";
  check_input(x, op);
  const int64_t channels = x.size(1);
  if (!running_mean.defined() || !running_var.defined())
    fail(op, "running_mean and running_var (C) = (" + std::to_string(channels) + ") are required (input " +
                 shape_str(x.shape()) + ")");
  detail::check_channel_vector(weight, channels, x, op, "weight");
  detail::check_channel_vector(bias, channels, x, op, "bias");
  detail::check_channel_vector(running_mean, channels, x, op, "running_mean");
  detail::check_channel_vector(running_var, channels, x, op, "running_var");
  check_eps(opt.eps, x, op);
  if (!(opt.momentum >= 0.0f && opt.momentum <= 1.0f))
    fail(op, "momentum must be in [0, 1], got " + detail::float_str(opt.momentum) + " (input " +
                 shape_str(x.shape()) + ")");
  // With a reducer the other processes add their values; a process alone needs two.
  if (training && !opt.reducer && x.numel() / channels < 2)
    fail(op, "training needs more than one value per channel, got input " + shape_str(x.shape()));

  const Device dev = x.device();
  Tensor mean = Tensor::empty({channels}, dev), invstd = Tensor::empty({channels}, dev);
  Tensor sums;  // (3, C) over the whole batch; training only
  if (training) {
    NoGradScope no_grad;
    sums = Tensor::empty({3, channels}, dev);
    // Sums around a shift at the mean, so that the variance is not the difference of two
    // large numbers: this batch's own mean for a process alone. Across processes, the
    // shift must be the same everywhere: first the whole batch's mean (from sums around
    // the running mean, which every process holds alike), then sums around it.
    const bool shift_by_mean = opt.reducer == nullptr;
    Tensor shift = shift_by_mean ? Tensor::empty({channels}, dev) : running_mean.clone();
    QUARTET_DISPATCH(dev, batch_norm_sums, x, shift_by_mean, shift, sums);
    if (opt.reducer) {
      opt.reducer->all_reduce_sum(sums);
      Tensor unused_mean = running_mean.clone(), unused_var = running_var.clone();
      QUARTET_DISPATCH(dev, batch_norm_batch_stats, sums, shift, 0.0f, opt.eps, mean, invstd, unused_mean,
                       unused_var);
      shift = mean.clone();
      QUARTET_DISPATCH(dev, batch_norm_sums, x, false, shift, sums);
      opt.reducer->all_reduce_sum(sums);
    }
    QUARTET_DISPATCH(dev, batch_norm_batch_stats, sums, shift, opt.momentum, opt.eps, mean, invstd,
                     running_mean, running_var);
  } else {
    QUARTET_DISPATCH(dev, batch_norm_eval_stats, running_mean, running_var, opt.eps, mean, invstd);
  }
  Tensor out = Tensor::empty(x.shape(), dev);
  QUARTET_DISPATCH(dev, batch_norm_apply, x, mean, invstd, weight, bias, out);

  const bool gx = x.requires_grad(), gw = weight.defined() && weight.requires_grad(),
             gb = bias.defined() && bias.requires_grad();
  record(out, op, {x, weight, bias},
         [x = x.detach(), w = weight.defined() ? weight.detach() : Tensor(), mean, invstd, sums,
          reducer = opt.reducer, gx, gw, gb](const Tensor& g) {
           const int64_t c = x.size(1);
           Tensor dx, dw, db;
           if (gw) dw = Tensor::empty({c}, g.device());
           if (gb) db = Tensor::empty({c}, g.device());
           const bool centred = gx && sums.defined();
           Tensor grad_sums;
           if (gw || gb || centred) {
             grad_sums = Tensor::empty({2, c}, g.device());
             QUARTET_DISPATCH(g.device(), batch_norm_grad_sums, g, x, mean, invstd, grad_sums, dw, db);
           }
           if (gx) {
             // Weight and bias gradients stay this process's own; the input gradient needs
             // the sums of the whole batch. Every process reaches this call alike.
             if (centred && reducer) reducer->all_reduce_sum(grad_sums);
             dx = Tensor::empty(x.shape(), g.device());
             QUARTET_DISPATCH(g.device(), batch_norm_backward_input, g, x, mean, invstd, w,
                              centred ? grad_sums : Tensor(), sums, dx);
           }
           return TensorList{dx, dw, db};
         });
  return out;
}

Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, float eps) {
  const char* op = "group_norm";
  check_input(x, op);
  const int64_t channels = x.size(1);
  if (groups < 1 || channels % groups != 0)
    fail(op, "groups must be >= 1 and divide the channels: input " + shape_str(x.shape()) + " has " +
                 std::to_string(channels) + " channels, groups " + std::to_string(groups));
  detail::check_channel_vector(weight, channels, x, op, "weight");
  detail::check_channel_vector(bias, channels, x, op, "bias");
  check_eps(eps, x, op);

  const Device dev = x.device();
  Tensor out = Tensor::empty(x.shape(), dev);
  Tensor mean = Tensor::empty({x.size(0), groups}, dev), invstd = Tensor::empty({x.size(0), groups}, dev);
  QUARTET_DISPATCH(dev, group_norm_forward, x, groups, weight, bias, eps, out, mean, invstd);
  const bool gx = x.requires_grad(), gw = weight.defined() && weight.requires_grad(),
             gb = bias.defined() && bias.requires_grad();
  record(out, op, {x, weight, bias},
         [x = x.detach(), w = weight.defined() ? weight.detach() : Tensor(), groups, mean, invstd, gx, gw,
          gb](const Tensor& g) {
           Tensor dx, dw, db;
           if (gx) dx = Tensor::empty(x.shape(), g.device());
           if (gw) dw = Tensor::empty({x.size(1)}, g.device());
           if (gb) db = Tensor::empty({x.size(1)}, g.device());
           QUARTET_DISPATCH(g.device(), group_norm_backward, g, x, groups, mean, invstd, w, dx, dw, db);
           return TensorList{dx, dw, db};
         });
  return out;
}

}  // namespace quartet::engine

#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/autograd.h"
#include "engine/cpu/loss.h"
#include "engine/dispatch.h"
#include "engine/ops.h"

namespace quartet::engine {
namespace {

[[noreturn]] void fail(const char* op, const std::string& message) {
  throw std::invalid_argument(std::string(op) + ": " + message);
}

// Checks logits (N, C, *spatial) with one target in [0, C) per (n, *spatial) position;
// returns the number of positions.
int64_t check_class_targets(const char* op, const Tensor& logits, const std::vector<int32_t>& targets) {
  if (logits.dim() < 2 || logits.numel() == 0)
    fail(op, "logits must be (N, C) or (N, C, *spatial) with no empty dim, got " + shape_str(logits.shape()));
  const int64_t classes = logits.size(1);
  const int64_t positions = logits.numel() / classes;
  if (static_cast<int64_t>(targets.size()) != positions)
    fail(op, std::to_string(targets.size()) + " targets for logits " + shape_str(logits.shape()) + ", expected " +
                 std::to_string(positions) + " (one per (n, *spatial) position)");
  for (size_t i = 0; i < targets.size(); ++i)
    if (targets[i] < 0 || targets[i] >= classes)
      fail(op, "target[" + std::to_string(i) + "] = " + std::to_string(targets[i]) + " is outside [0, " +
                   std::to_string(classes) + ") for logits " + shape_str(logits.shape()));
  return positions;
}

void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  check_same_shape(a, b, op);
  if (!(a.device() == b.device()))
    fail(op, "inputs on different devices: " + a.device().str() + " and " + b.device().str());
  if (a.numel() == 0) fail(op, "empty input " + shape_str(a.shape()));
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets) {
  return cross_entropy(logits, targets, {});
}

Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets,
                     const std::vector<float>& class_weights) {
  const char* op = "cross_entropy";
  check_class_targets(op, logits, targets);
  const int64_t classes = logits.size(1);
  if (!class_weights.empty()) {
    if (static_cast<int64_t>(class_weights.size()) != classes)
      fail(op, std::to_string(class_weights.size()) + " class weights for logits " + shape_str(logits.shape()) +
                   ", expected " + std::to_string(classes) + " (one per class) or none");
    for (size_t c = 0; c < class_weights.size(); ++c)
      if (!(class_weights[c] >= 0.0f) || !std::isfinite(class_weights[c]))
        fail(op, "class_weights[" + std::to_string(c) + "] = " + std::to_string(class_weights[c]) +
                     " must be finite and >= 0");
  }
  // As PyTorch: when every target's class weighs 0 the weighted mean is 0/0 = nan.
  double weight_sum = 0.0;
  for (int32_t t : targets) weight_sum += class_weights.empty() ? 1.0 : class_weights[t];
  const float inv_weight_sum = static_cast<float>(1.0 / weight_sum);

  Tensor probs = Tensor::empty(logits.shape(), logits.device());
  Tensor out = Tensor::empty({1}, logits.device());
  QUARTET_DISPATCH(logits.device(), cross_entropy_forward, logits, targets, class_weights, inv_weight_sum, probs,
                   out);
  // The closure copies the targets, so build it only when it will be kept.
  if (!needs_grad({&logits})) return out;
  record(out, op, {logits}, [probs, targets, class_weights, inv_weight_sum](const Tensor& g) {
    Tensor d = Tensor::empty(probs.shape(), g.device());
    QUARTET_DISPATCH(g.device(), cross_entropy_backward, probs, targets, class_weights, inv_weight_sum, g, d);
    return TensorList{d};
  });
  return out;
}

Tensor bce_with_logits(const Tensor& logits, const Tensor& targets) {
  const char* op = "bce_with_logits";
  check_pair(op, logits, targets);
  if (targets.device().is_cpu()) {
    const float* t = targets.data();
    for (int64_t i = 0; i < targets.numel(); ++i)
      if (!(t[i] >= 0.0f && t[i] <= 1.0f))
        fail(op, "targets[" + std::to_string(i) + "] = " + std::to_string(t[i]) + " is outside [0, 1] (targets " +
                     shape_str(targets.shape()) + ")");
  }
  Tensor out = Tensor::empty({1}, logits.device());
  QUARTET_DISPATCH(logits.device(), bce_with_logits_forward, logits, targets, out);
  const bool gx = logits.requires_grad(), gt = targets.requires_grad();
  record(out, op, {logits, targets}, [x = logits.detach(), t = targets.detach(), gx, gt](const Tensor& g) {
    Tensor dx = gx ? Tensor::empty(x.shape(), g.device()) : Tensor();
    Tensor dt = gt ? Tensor::empty(t.shape(), g.device()) : Tensor();
    QUARTET_DISPATCH(g.device(), bce_with_logits_backward, x, t, g, dx, dt);
    return TensorList{dx, dt};
  });
  return out;
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  const char* op = "mse_loss";
  check_pair(op, input, target);
  Tensor out = Tensor::empty({1}, input.device());
  QUARTET_DISPATCH(input.device(), mse_loss_forward, input, target, out);
  const bool ga = input.requires_grad(), gb = target.requires_grad();
  record(out, op, {input, target}, [a = input.detach(), b = target.detach(), ga, gb](const Tensor& g) {
    Tensor da = ga ? Tensor::empty(a.shape(), g.device()) : Tensor();
    Tensor db = gb ? Tensor::empty(b.shape(), g.device()) : Tensor();
    QUARTET_DISPATCH(g.device(), mse_loss_backward, a, b, g, da, db);
    return TensorList{da, db};
  });
  return out;
}

Tensor soft_dice_loss(const Tensor& logits, const std::vector<int32_t>& targets, bool include_background,
                      float smooth, bool per_sample) {
  const char* op = "soft_dice_loss";
  check_class_targets(op, logits, targets);
  if (!include_background && logits.size(1) < 2)
    fail(op, "logits " + shape_str(logits.shape()) +
                 " have no class to score: background (class 0) is excluded, so C must be >= 2");
  if (!(smooth >= 0.0f) || !std::isfinite(smooth))
    fail(op, "smooth must be finite and >= 0, got " + std::to_string(smooth));
  Tensor probs = Tensor::empty(logits.shape(), logits.device());
  const int64_t groups = per_sample ? logits.size(0) : 1;
  Tensor stats = Tensor::empty({2, groups, logits.size(1)}, logits.device());
  Tensor out = Tensor::empty({1}, logits.device());
  QUARTET_DISPATCH(logits.device(), soft_dice_forward, logits, targets, include_background, smooth, probs, stats,
                   out);
  if (!needs_grad({&logits})) return out;
  record(out, op, {logits}, [probs, stats, targets, include_background](const Tensor& g) {
    Tensor d = Tensor::empty(probs.shape(), g.device());
    QUARTET_DISPATCH(g.device(), soft_dice_backward, probs, targets, include_background, stats, g, d);
    return TensorList{d};
  });
  return out;
}

}  // namespace quartet::engine

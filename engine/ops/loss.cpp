#include <stdexcept>
#include <string>

#include "engine/autograd.h"
#include "engine/cpu/loss.h"
#include "engine/dispatch.h"
#include "engine/ops.h"

namespace quartet::engine {

Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets) {
  if (logits.dim() != 2 || logits.size(0) == 0)
    throw std::invalid_argument("cross_entropy: logits must be (N, classes) with N >= 1, got " +
                                shape_str(logits.shape()));
  const int64_t n = logits.size(0), k = logits.size(1);
  if (static_cast<int64_t>(targets.size()) != n)
    throw std::invalid_argument("cross_entropy: " + std::to_string(targets.size()) + " targets for logits " +
                                shape_str(logits.shape()));
  for (int64_t i = 0; i < n; ++i)
    if (targets[i] < 0 || targets[i] >= k)
      throw std::invalid_argument("cross_entropy: target[" + std::to_string(i) + "] = " +
                                  std::to_string(targets[i]) + " is outside [0, " + std::to_string(k) + ")");
  Tensor probs = Tensor::empty(logits.shape(), logits.device());
  Tensor out = Tensor::empty({1}, logits.device());
  if (!logits.device().is_cpu()) throw_no_backend(logits.device(), "cross_entropy");
  out.data()[0] = cpu::softmax_cross_entropy(logits, targets, probs);
  record(out, "cross_entropy", {logits}, [probs, targets](const Tensor& g) {
    Tensor d = Tensor::empty(probs.shape(), g.device());
    QUARTET_DISPATCH(g.device(), softmax_cross_entropy_backward, probs, targets, g, d);
    return TensorList{d};
  });
  return out;
}

}  // namespace quartet::engine

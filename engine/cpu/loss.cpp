#include "engine/cpu/loss.h"

#include <algorithm>
#include <cmath>

namespace quartet::engine::cpu {

float softmax_cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets, Tensor& probs) {
  const int64_t n = logits.size(0), k = logits.size(1);
  const float* x = logits.data();
  float* p = probs.data();
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * k;
    float* prow = p + i * k;
    const float m = *std::max_element(row, row + k);
    double z = 0.0;
    for (int64_t j = 0; j < k; ++j) z += std::exp(static_cast<double>(row[j] - m));
    const double log_z = std::log(z);
    for (int64_t j = 0; j < k; ++j) prow[j] = static_cast<float>(std::exp(row[j] - m - log_z));
    total += log_z - (row[targets[i]] - m);
  }
  return static_cast<float>(total / static_cast<double>(n));
}

void softmax_cross_entropy_backward(const Tensor& probs, const std::vector<int32_t>& targets,
                                    const Tensor& grad_loss, Tensor& grad_logits) {
  const int64_t n = probs.size(0), k = probs.size(1);
  const float s = grad_loss.data()[0] / static_cast<float>(n);
  const float* p = probs.data();
  float* g = grad_logits.data();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) g[i * k + j] = s * p[i * k + j];
    g[i * k + targets[i]] -= s;
  }
}

}  // namespace quartet::engine::cpu

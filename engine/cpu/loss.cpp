#include "engine/cpu/loss.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "engine/threads.h"

namespace quartet::engine::cpu {
namespace {

// Positions per block of a class-indexed loss; the stack buffers below hold one block.
constexpr int64_t kBlock = 512;
// Elements per chunk of an element-wise loss.
constexpr int64_t kChunk = 4096;
// Element visits below which a loss runs on one thread: forking costs more than it saves.
constexpr int64_t kMinParallelWork = int64_t{1} << 16;

// (N, C, S) cut into blocks of up to kBlock positions of one sample; block b covers
// sample b / per_n, positions [s0, s0 + len).
struct Blocks {
  int64_t n, c, s, per_n, count;
  explicit Blocks(const Tensor& t)
      : n(t.size(0)), c(t.size(1)), s(t.numel() / (t.size(0) * t.size(1))),
        per_n((s + kBlock - 1) / kBlock), count(n * per_n) {}
  int64_t sample(int64_t b) const { return b / per_n; }
  int64_t s0(int64_t b) const { return (b % per_n) * kBlock; }
  int64_t len(int64_t b) const { return std::min(kBlock, s - s0(b)); }
  // Offset of (sample(b), channel 0, s0(b)) in an (N, C, S) buffer; channel c adds c * s.
  int64_t offset(int64_t b) const { return sample(b) * c * s + s0(b); }
  // Index of the first target of block b.
  int64_t target(int64_t b) const { return sample(b) * s + s0(b); }
};

template <class Fn>
void for_each_block(int64_t count, int64_t work, Fn&& fn) {
#pragma omp parallel for schedule(static) num_threads(compute_threads()) if (count > 1 && work > kMinParallelWork)
  for (int64_t b = 0; b < count; ++b) fn(b);
}

// Sums partial(i0, i1) over fixed chunks of [0, n) in chunk order, so the result does
// not depend on the number of threads.
template <class Fn>
double chunked_sum(int64_t n, Fn&& partial) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> parts(static_cast<size_t>(chunks));
  for_each_block(chunks, n, [&](int64_t k) { parts[k] = partial(k * kChunk, std::min(n, (k + 1) * kChunk)); });
  double total = 0.0;
  for (double v : parts) total += v;
  return total;
}

// Softmax over C of one block: x and p point at channel 0 of its first position, with
// channel stride S. Writes lse[j] = log sum_c exp(x[c, j]) for the len positions.
void softmax_block(const float* x, float* p, int64_t C, int64_t S, int64_t len, double* lse) {
  std::array<float, kBlock> m;
  std::array<double, kBlock> z{};
  std::copy_n(x, len, m.begin());
  for (int64_t c = 1; c < C; ++c)
    for (int64_t j = 0; j < len; ++j) m[j] = std::max(m[j], x[c * S + j]);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < len; ++j) {
      const float e = std::exp(x[c * S + j] - m[j]);
      p[c * S + j] = e;
      z[j] += e;
    }
  for (int64_t j = 0; j < len; ++j) lse[j] = m[j] + std::log(z[j]);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < len; ++j) p[c * S + j] = static_cast<float>(p[c * S + j] / z[j]);
}

float class_weight(const std::vector<float>& w, int32_t t) { return w.empty() ? 1.0f : w[t]; }

}  // namespace

void cross_entropy_forward(const Tensor& logits, const std::vector<int32_t>& targets,
                           const std::vector<float>& class_weights, float inv_weight_sum,
                           Tensor& probs, Tensor& loss) {
  const Blocks bl(logits);
  const float* x = logits.data();
  float* p = probs.data();
  std::vector<double> parts(static_cast<size_t>(bl.count));
  for_each_block(bl.count, logits.numel(), [&](int64_t b) {
    const int64_t off = bl.offset(b), len = bl.len(b);
    const int32_t* t = targets.data() + bl.target(b);
    std::array<double, kBlock> lse;
    softmax_block(x + off, p + off, bl.c, bl.s, len, lse.data());
    double acc = 0.0;
    for (int64_t j = 0; j < len; ++j)
      acc += class_weight(class_weights, t[j]) * (lse[j] - x[off + t[j] * bl.s + j]);
    parts[b] = acc;
  });
  double total = 0.0;
  for (double v : parts) total += v;
  loss.data()[0] = static_cast<float>(total * inv_weight_sum);
}

void cross_entropy_backward(const Tensor& probs, const std::vector<int32_t>& targets,
                            const std::vector<float>& class_weights, float inv_weight_sum,
                            const Tensor& grad_loss, Tensor& grad_logits) {
  const Blocks bl(probs);
  const float scale = grad_loss.data()[0] * inv_weight_sum;
  const float* p = probs.data();
  float* d = grad_logits.data();
  for_each_block(bl.count, probs.numel(), [&](int64_t b) {
    const int64_t off = bl.offset(b), len = bl.len(b);
    const int32_t* t = targets.data() + bl.target(b);
    std::array<float, kBlock> coef;
    for (int64_t j = 0; j < len; ++j) coef[j] = scale * class_weight(class_weights, t[j]);
    for (int64_t c = 0; c < bl.c; ++c)
      for (int64_t j = 0; j < len; ++j) d[off + c * bl.s + j] = coef[j] * p[off + c * bl.s + j];
    for (int64_t j = 0; j < len; ++j) d[off + t[j] * bl.s + j] -= coef[j];
  });
}

void bce_with_logits_forward(const Tensor& logits, const Tensor& targets, Tensor& loss) {
  const float* x = logits.data();
  const float* t = targets.data();
  const int64_t n = logits.numel();
  const double total = chunked_sum(n, [&](int64_t i0, int64_t i1) {
    double acc = 0.0;
    for (int64_t i = i0; i < i1; ++i)
      acc += std::max(x[i], 0.0f) - x[i] * t[i] + std::log1p(std::exp(-std::abs(x[i])));
    return acc;
  });
  loss.data()[0] = static_cast<float>(total / static_cast<double>(n));
}

void bce_with_logits_backward(const Tensor& logits, const Tensor& targets, const Tensor& grad_loss,
                              Tensor& grad_logits, Tensor& grad_targets) {
  const int64_t n = logits.numel();
  const float s = grad_loss.data()[0] / static_cast<float>(n);
  const float* x = logits.data();
  const float* t = targets.data();
  float* dx = grad_logits.defined() ? grad_logits.data() : nullptr;
  float* dt = grad_targets.defined() ? grad_targets.data() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    // sigmoid without overflow: exp of a non-positive number only.
    const float e = std::exp(-std::abs(x[i]));
    const float sig = x[i] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    if (dx) dx[i] = s * (sig - t[i]);
    if (dt) dt[i] = -s * x[i];
  }
}

void mse_loss_forward(const Tensor& input, const Tensor& target, Tensor& loss) {
  const float* a = input.data();
  const float* b = target.data();
  const int64_t n = input.numel();
  const double total = chunked_sum(n, [&](int64_t i0, int64_t i1) {
    double acc = 0.0;
    for (int64_t i = i0; i < i1; ++i) {
      const double d = static_cast<double>(a[i]) - b[i];
      acc += d * d;
    }
    return acc;
  });
  loss.data()[0] = static_cast<float>(total / static_cast<double>(n));
}

void mse_loss_backward(const Tensor& input, const Tensor& target, const Tensor& grad_loss,
                       Tensor& grad_input, Tensor& grad_target) {
  const int64_t n = input.numel();
  const float s = 2.0f * grad_loss.data()[0] / static_cast<float>(n);
  const float* a = input.data();
  const float* b = target.data();
  float* da = grad_input.defined() ? grad_input.data() : nullptr;
  float* db = grad_target.defined() ? grad_target.data() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    const float d = s * (a[i] - b[i]);
    if (da) da[i] = d;
    if (db) db[i] = -d;
  }
}

void soft_dice_forward(const Tensor& logits, const std::vector<int32_t>& targets, bool include_background,
                       float smooth, Tensor& probs, Tensor& stats, Tensor& loss) {
  const Blocks bl(logits);
  const int64_t C = bl.c;
  const float* x = logits.data();
  float* p = probs.data();
  // Per block and class: sum p t, sum p, sum t.
  std::vector<double> parts(static_cast<size_t>(bl.count * 3 * C), 0.0);
  for_each_block(bl.count, logits.numel(), [&](int64_t b) {
    const int64_t off = bl.offset(b), len = bl.len(b);
    const int32_t* t = targets.data() + bl.target(b);
    std::array<double, kBlock> lse;
    softmax_block(x + off, p + off, C, bl.s, len, lse.data());
    double* inter = parts.data() + b * 3 * C;
    double* psum = inter + C;
    double* tsum = psum + C;
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0.0;
      for (int64_t j = 0; j < len; ++j) acc += p[off + c * bl.s + j];
      psum[c] = acc;
    }
    for (int64_t j = 0; j < len; ++j) {
      inter[t[j]] += p[off + t[j] * bl.s + j];
      tsum[t[j]] += 1.0;
    }
  });
  // Groups: the whole batch (G = 1) or each sample (G = N); blocks are summed in order.
  const int64_t G = stats.size(1);
  std::vector<double> total(static_cast<size_t>(G * 3 * C), 0.0);
  for (int64_t b = 0; b < bl.count; ++b) {
    double* tot = total.data() + (G == 1 ? 0 : bl.sample(b)) * 3 * C;
    for (int64_t k = 0; k < 3 * C; ++k) tot[k] += parts[b * 3 * C + k];
  }
  float* st = stats.data();
  const int64_t first = include_background ? 0 : 1;
  double score = 0.0;
  for (int64_t g = 0; g < G; ++g) {
    const double* tot = total.data() + g * 3 * C;
    for (int64_t c = 0; c < C; ++c) {
      const double num = 2.0 * tot[c] + smooth;
      const double den = tot[C + c] + tot[2 * C + c] + smooth;
      st[g * C + c] = static_cast<float>(num);
      st[(G + g) * C + c] = static_cast<float>(den);
      if (c >= first) score += num / den;
    }
  }
  loss.data()[0] = static_cast<float>(1.0 - score / static_cast<double>(G * (C - first)));
}

void soft_dice_backward(const Tensor& probs, const std::vector<int32_t>& targets, bool include_background,
                        const Tensor& stats, const Tensor& grad_loss, Tensor& grad_logits) {
  const Blocks bl(probs);
  const int64_t C = bl.c;
  const int64_t G = stats.size(1);
  const int64_t first = include_background ? 0 : 1;
  const double g = grad_loss.data()[0] / static_cast<double>(G * (C - first));
  // dL/dp_c at a position of group k = b_kc + [t == c] a_kc for scored classes, 0 for the others.
  std::vector<float> a(static_cast<size_t>(G * C), 0.0f), bcoef(static_cast<size_t>(G * C), 0.0f);
  const float* st = stats.data();
  for (int64_t k = 0; k < G; ++k)
    for (int64_t c = first; c < C; ++c) {
      const double num = st[k * C + c], den = st[(G + k) * C + c];
      a[k * C + c] = static_cast<float>(-g * 2.0 / den);
      bcoef[k * C + c] = static_cast<float>(g * num / (den * den));
    }
  const float* p = probs.data();
  float* d = grad_logits.data();
  for_each_block(bl.count, probs.numel(), [&](int64_t b) {
    const int64_t off = bl.offset(b), len = bl.len(b);
    const int32_t* t = targets.data() + bl.target(b);
    const float* ak = a.data() + (G == 1 ? 0 : bl.sample(b)) * C;
    const float* bk = bcoef.data() + (G == 1 ? 0 : bl.sample(b)) * C;
    // Softmax backward: dx_c = p_c (dp_c - sum_k p_k dp_k).
    std::array<float, kBlock> dot{};
    for (int64_t c = first; c < C; ++c)
      for (int64_t j = 0; j < len; ++j) dot[j] += p[off + c * bl.s + j] * bk[c];
    for (int64_t j = 0; j < len; ++j) dot[j] += p[off + t[j] * bl.s + j] * ak[t[j]];
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < len; ++j) d[off + c * bl.s + j] = p[off + c * bl.s + j] * (bk[c] - dot[j]);
    for (int64_t j = 0; j < len; ++j) d[off + t[j] * bl.s + j] += p[off + t[j] * bl.s + j] * ak[t[j]];
  });
}

}  // namespace quartet::engine::cpu

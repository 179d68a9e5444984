#include "engine/cuda/loss.h"

#include <memory>

#include "engine/cuda/map_reduce.cuh"
#include "engine/cuda/runtime.h"

namespace quartet::engine::cuda {
namespace {

// Positions of one soft Dice block: each block sums one (sample, class, chunk); the
// chunking depends on S alone, so the sums do not depend on the GPU.
constexpr int64_t kDiceChunk = 8192;

// Class-indexed tensors (N, C, *spatial) viewed as (N, C, S).
struct ClassView {
  int64_t n, c, s;
  explicit ClassView(const Tensor& t) : n(t.size(0)), c(t.size(1)), s(t.numel() / (t.size(0) * t.size(1))) {}
};

// Host values copied to scratch device memory that lives as long as this; null when empty.
class DeviceCopy {
 public:
  DeviceCopy(const Device& device, const void* host, size_t bytes) {
    if (bytes == 0) return;
    scratch_ = std::make_unique<Workspace>(device, bytes);
    upload(device, host, scratch_->data(), bytes);
  }
  template <class T>
  const T* as() const {
    return scratch_ ? static_cast<const T*>(scratch_->data()) : nullptr;
  }

 private:
  std::unique_ptr<Workspace> scratch_;
};

template <class T>
DeviceCopy device_copy(const Device& device, const std::vector<T>& v) {
  return DeviceCopy(device, v.data(), sizeof(T) * v.size());
}

// Softmax over C at one position as the CPU computes it: x and p point at channel 0,
// channel stride S; the max by std::max's rule (a NaN first value stays), exp in float,
// the normaliser summed in double. Returns log sum_c exp(x_c).
__device__ double softmax_at(const float* x, float* p, int64_t C, int64_t S) {
  float m = x[0];
  for (int64_t c = 1; c < C; ++c) {
    const float v = x[c * S];
    m = m < v ? v : m;
  }
  double z = 0.0;
  for (int64_t c = 0; c < C; ++c) z += expf(x[c * S] - m);
  for (int64_t c = 0; c < C; ++c) p[c * S] = static_cast<float>(expf(x[c * S] - m) / z);
  return m + log(z);
}

// loss[0] = total * mul / div, in double as the CPU rounds it once to float.
struct StoreLoss {
  float* loss;
  double mul, div;
  __device__ void operator()(double total) const { loss[0] = static_cast<float>(total * mul / div); }
};

// Term i = n * S + s: writes the softmax of that position, returns w[t] * nll.
struct CrossEntropyTerm {
  const float* x;
  float* p;
  const int32_t* t;
  const float* w;  // null: all ones
  int64_t C, S;
  __device__ double operator()(int64_t i) const {
    const int64_t n = i / S, off = n * C * S + (i - n * S);
    const double lse = softmax_at(x + off, p + off, C, S);
    const int32_t k = t[i];
    const float wk = w ? w[k] : 1.0f;
    return wk * (lse - x[off + k * S]);
  }
};

// Element i of (N, C, S): coef * p, less coef at the target class.
struct CrossEntropyGrad {
  const float* p;
  const int32_t* t;
  const float* w;
  const float* grad_loss;
  float inv_weight_sum;
  int64_t C, S;
  float* d;
  __device__ void operator()(int64_t i) const {
    const int64_t nc = i / S, s = i - nc * S, n = nc / C, c = nc - n * C;
    const int32_t k = t[n * S + s];
    const float coef = grad_loss[0] * inv_weight_sum * (w ? w[k] : 1.0f);
    const float v = coef * p[i];
    d[i] = c == k ? v - coef : v;
  }
};

struct BceTerm {
  const float *x, *t;
  __device__ double operator()(int64_t i) const {
    const float v = x[i];
    return (v < 0.0f ? 0.0f : v) - v * t[i] + log1pf(expf(-fabsf(v)));
  }
};

struct BceGrad {
  const float *x, *t, *grad_loss;
  float n;
  float *dx, *dt;  // either may be null
  __device__ void operator()(int64_t i) const {
    const float s = grad_loss[0] / n;
    const float v = x[i];
    const float e = expf(-fabsf(v));
    const float sig = v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    if (dx) dx[i] = s * (sig - t[i]);
    if (dt) dt[i] = -s * v;
  }
};

struct MseTerm {
  const float *a, *b;
  __device__ double operator()(int64_t i) const {
    const double d = static_cast<double>(a[i]) - b[i];
    return d * d;
  }
};

struct MseGrad {
  const float *a, *b, *grad_loss;
  float n;
  float *da, *db;  // either may be null
  __device__ void operator()(int64_t i) const {
    const float d = 2.0f * grad_loss[0] / n * (a[i] - b[i]);
    if (da) da[i] = d;
    if (db) db[i] = -d;
  }
};

struct Softmax {
  const float* x;
  float* p;
  int64_t C, S;
  __device__ void operator()(int64_t i) const {
    const int64_t n = i / S, off = n * C * S + (i - n * S);
    softmax_at(x + off, p + off, C, S);
  }
};

// Block (n, chunk, c) of the grid: sum p t, sum p and sum t of class c over the chunk's
// positions, into parts[(n * chunks + chunk) * 3C + {0, C, 2C} + c] (the CPU's layout).
__global__ void __launch_bounds__(kSumThreads)
    dice_partial_kernel(const float* p, const int32_t* t, int64_t C, int64_t S, int64_t chunks, double* parts) {
  __shared__ double shared[kSumThreads];
  const int64_t b = blockIdx.x, c = b % C, nk = b / C, chunk = nk % chunks, n = nk / chunks;
  const int64_t s0 = chunk * kDiceChunk, s1 = s0 + kDiceChunk < S ? s0 + kDiceChunk : S;
  const float* pc = p + (n * C + c) * S;
  const int32_t* tn = t + n * S;
  double inter = 0.0, psum = 0.0, tsum = 0.0;
  for (int64_t s = s0 + threadIdx.x; s < s1; s += kSumThreads) {
    const float v = pc[s];
    psum += v;
    if (tn[s] == c) {
      inter += v;
      tsum += 1.0;
    }
  }
  inter = block_sum(inter, shared);
  psum = block_sum(psum, shared);
  tsum = block_sum(tsum, shared);
  if (threadIdx.x == 0) {
    double* out = parts + nk * 3 * C + c;
    out[0] = inter;
    out[C] = psum;
    out[2 * C] = tsum;
  }
}

// One block: stats (2, G, C) from the parts summed in block order per group, and the
// loss from the scored classes' ratios summed in (g, c) order by one thread.
__global__ void __launch_bounds__(kSumThreads)
    dice_finish_kernel(const double* parts, int64_t N, int64_t chunks, int64_t C, int64_t G, int64_t first,
                       float smooth, double* ratio, float* stats, float* loss) {
  const int64_t per_group = G == 1 ? N * chunks : chunks;
  for (int64_t gc = threadIdx.x; gc < G * C; gc += kSumThreads) {
    const int64_t g = gc / C, c = gc - g * C;
    const double* part = parts + g * per_group * 3 * C + c;
    double inter = 0.0, psum = 0.0, tsum = 0.0;
    for (int64_t b = 0; b < per_group; ++b, part += 3 * C) {
      inter += part[0];
      psum += part[C];
      tsum += part[2 * C];
    }
    const double num = 2.0 * inter + smooth;
    const double den = psum + tsum + smooth;
    stats[g * C + c] = static_cast<float>(num);
    stats[(G + g) * C + c] = static_cast<float>(den);
    ratio[gc] = num / den;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  double score = 0.0;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t c = first; c < C; ++c) score += ratio[g * C + c];
  loss[0] = static_cast<float>(1.0 - score / static_cast<double>(G * (C - first)));
}

// Entry (k, c) of the coefficients dL/dp_c = b_kc + [t == c] a_kc (0 for unscored c).
struct DiceCoefficients {
  const float *stats, *grad_loss;
  int64_t C, G, first;
  float *a, *b;
  __device__ void operator()(int64_t i) const {
    const int64_t k = i / C, c = i - k * C;
    if (c < first) {
      a[i] = b[i] = 0.0f;
      return;
    }
    const double g = grad_loss[0] / static_cast<double>(G * (C - first));
    const double num = stats[k * C + c], den = stats[(G + k) * C + c];
    a[i] = static_cast<float>(-g * 2.0 / den);
    b[i] = static_cast<float>(g * num / (den * den));
  }
};

// Position i = n * S + s: softmax backward dx_c = p_c (dp_c - sum_k p_k dp_k), in the
// CPU's float order.
struct DiceGrad {
  const float* p;
  const int32_t* t;
  const float *a, *b;
  int64_t C, S, G, first;
  float* d;
  __device__ void operator()(int64_t i) const {
    const int64_t n = i / S, off = n * C * S + (i - n * S);
    const float* ak = a + (G == 1 ? 0 : n) * C;
    const float* bk = b + (G == 1 ? 0 : n) * C;
    const int32_t k = t[i];
    float dot = 0.0f;
    for (int64_t c = first; c < C; ++c) dot += p[off + c * S] * bk[c];
    const float target_term = p[off + k * S] * ak[k];
    dot += target_term;
    for (int64_t c = 0; c < C; ++c) d[off + c * S] = p[off + c * S] * (bk[c] - dot);
    d[off + k * S] += target_term;
  }
};

}  // namespace

void cross_entropy_forward(const Tensor& logits, const std::vector<int32_t>& targets,
                           const std::vector<float>& class_weights, float inv_weight_sum,
                           Tensor& probs, Tensor& loss) {
  const Device dev = logits.device();
  const ClassView v(logits);
  const DeviceCopy t = device_copy(dev, targets), w = device_copy(dev, class_weights);
  Workspace scratch(dev, kSumScratchBytes);
  const CrossEntropyTerm term{logits.device_data(), probs.device_data(), t.as<int32_t>(), w.as<float>(), v.c, v.s};
  deterministic_sum(v.n * v.s, term, StoreLoss{loss.device_data(), inv_weight_sum, 1.0}, scratch.data(),
                    stream_of(loss));
}

void cross_entropy_backward(const Tensor& probs, const std::vector<int32_t>& targets,
                            const std::vector<float>& class_weights, float inv_weight_sum,
                            const Tensor& grad_loss, Tensor& grad_logits) {
  const Device dev = probs.device();
  const ClassView v(probs);
  const DeviceCopy t = device_copy(dev, targets), w = device_copy(dev, class_weights);
  const CrossEntropyGrad grad{probs.device_data(), t.as<int32_t>(), w.as<float>(), grad_loss.device_data(),
                              inv_weight_sum, v.c, v.s, grad_logits.device_data()};
  for_each(probs.numel(), grad, stream_of(grad_logits), "cross_entropy_backward");
}

void bce_with_logits_forward(const Tensor& logits, const Tensor& targets, Tensor& loss) {
  Workspace scratch(logits.device(), kSumScratchBytes);
  const int64_t n = logits.numel();
  deterministic_sum(n, BceTerm{logits.device_data(), targets.device_data()},
                    StoreLoss{loss.device_data(), 1.0, static_cast<double>(n)}, scratch.data(), stream_of(loss));
}

void bce_with_logits_backward(const Tensor& logits, const Tensor& targets, const Tensor& grad_loss,
                              Tensor& grad_logits, Tensor& grad_targets) {
  if (!grad_logits.defined() && !grad_targets.defined()) return;
  const int64_t n = logits.numel();
  const BceGrad grad{logits.device_data(),
                     targets.device_data(),
                     grad_loss.device_data(),
                     static_cast<float>(n),
                     grad_logits.defined() ? grad_logits.device_data() : nullptr,
                     grad_targets.defined() ? grad_targets.device_data() : nullptr};
  for_each(n, grad, stream_of(logits), "bce_with_logits_backward");
}

void mse_loss_forward(const Tensor& input, const Tensor& target, Tensor& loss) {
  Workspace scratch(input.device(), kSumScratchBytes);
  const int64_t n = input.numel();
  deterministic_sum(n, MseTerm{input.device_data(), target.device_data()},
                    StoreLoss{loss.device_data(), 1.0, static_cast<double>(n)}, scratch.data(), stream_of(loss));
}

void mse_loss_backward(const Tensor& input, const Tensor& target, const Tensor& grad_loss,
                       Tensor& grad_input, Tensor& grad_target) {
  if (!grad_input.defined() && !grad_target.defined()) return;
  const int64_t n = input.numel();
  const MseGrad grad{input.device_data(),
                     target.device_data(),
                     grad_loss.device_data(),
                     static_cast<float>(n),
                     grad_input.defined() ? grad_input.device_data() : nullptr,
                     grad_target.defined() ? grad_target.device_data() : nullptr};
  for_each(n, grad, stream_of(input), "mse_loss_backward");
}

void soft_dice_forward(const Tensor& logits, const std::vector<int32_t>& targets, bool include_background,
                       float smooth, Tensor& probs, Tensor& stats, Tensor& loss) {
  const Device dev = logits.device();
  const cudaStream_t stream = stream_of(logits);
  const ClassView v(logits);
  const int64_t G = stats.size(1), first = include_background ? 0 : 1;
  const int64_t chunks = (v.s + kDiceChunk - 1) / kDiceChunk;
  const DeviceCopy t = device_copy(dev, targets);
  for_each(v.n * v.s, Softmax{logits.device_data(), probs.device_data(), v.c, v.s}, stream, "soft_dice_softmax");
  // Parts (3C per (sample, chunk)), then one ratio per (group, class).
  const int64_t part_count = v.n * chunks * 3 * v.c;
  Workspace scratch(dev, sizeof(double) * static_cast<size_t>(part_count + G * v.c));
  double* parts = static_cast<double*>(scratch.data());
  const int64_t blocks = v.n * chunks * v.c;
  dice_partial_kernel<<<static_cast<unsigned>(blocks), kSumThreads, 0, stream>>>(probs.device_data(),
                                                                                  t.as<int32_t>(), v.c, v.s, chunks,
                                                                                  parts);
  QUARTET_CUDA_LAUNCHED("dice_partial_kernel");
  dice_finish_kernel<<<1, kSumThreads, 0, stream>>>(parts, v.n, chunks, v.c, G, first, smooth, parts + part_count,
                                                    stats.device_data(), loss.device_data());
  QUARTET_CUDA_LAUNCHED("dice_finish_kernel");
}

void soft_dice_backward(const Tensor& probs, const std::vector<int32_t>& targets, bool include_background,
                        const Tensor& stats, const Tensor& grad_loss, Tensor& grad_logits) {
  const Device dev = probs.device();
  const cudaStream_t stream = stream_of(probs);
  const ClassView v(probs);
  const int64_t G = stats.size(1), first = include_background ? 0 : 1;
  const DeviceCopy t = device_copy(dev, targets);
  Workspace coef(dev, sizeof(float) * static_cast<size_t>(2 * G * v.c));
  float* a = static_cast<float*>(coef.data());
  float* b = a + G * v.c;
  for_each(G * v.c, DiceCoefficients{stats.device_data(), grad_loss.device_data(), v.c, G, first, a, b}, stream,
           "soft_dice_coefficients");
  for_each(v.n * v.s, DiceGrad{probs.device_data(), t.as<int32_t>(), a, b, v.c, v.s, G, first,
                               grad_logits.device_data()},
           stream, "soft_dice_backward");
}

}  // namespace quartet::engine::cuda

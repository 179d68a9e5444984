#include "engine/cuda/transformer.h"

#include <cfloat>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cuda/map_reduce.cuh"
#include "engine/cuda/runtime.h"

namespace quartet::engine::cuda {
namespace {

const float* data_or_null(const Tensor& t) { return t.defined() ? t.device_data() : nullptr; }
float* data_or_null(Tensor& t) { return t.defined() ? t.device_data() : nullptr; }

// Block-per-row kernels run kSumThreads threads, so block_sum (map_reduce.cuh) applies.
unsigned row_blocks(int64_t rows) {
  if (rows > INT_MAX) throw std::runtime_error("transformer kernels: " + std::to_string(rows) + " rows for one launch");
  return static_cast<unsigned>(rows);
}

// The max of v over the block in a fixed tree; every thread gets it. `shared` holds
// kSumThreads floats; the trailing barrier lets a caller reuse it.
__device__ float block_max(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kSumThreads / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride)
      shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  const float m = shared[0];
  __syncthreads();
  return m;
}

// ---- embedding ----

struct EmbeddingRows {
  const float *indices, *weight;
  int64_t f;
  float* out;
  __device__ void operator()(int64_t i) const {
    out[i] = weight[static_cast<int64_t>(indices[i / f]) * f + i % f];
  }
};

// Row r of the gradient: the rows order[offsets[r]..offsets[r+1]) of grad_out, in order.
struct EmbeddingGrad {
  const float* grad_out;
  const int64_t *offsets, *order;
  int64_t f;
  float* grad_weight;
  __device__ void operator()(int64_t i) const {
    const int64_t r = i / f, j = i % f;
    float s = 0.0f;
    for (int64_t p = offsets[r]; p < offsets[r + 1]; ++p) s += grad_out[order[p] * f + j];
    grad_weight[i] = s;
  }
};

// ---- layer norm ----

__global__ void __launch_bounds__(kSumThreads)
    layer_norm_forward_kernel(const float* x, const float* w, const float* b, float eps, int64_t rows, int64_t f,
                              float* y, float* mean, float* rstd) {
  __shared__ double shared[kSumThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * f;
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < f; j += blockDim.x) s += xr[j];
    const double mu = block_sum(s, shared) / static_cast<double>(f);
    double s2 = 0.0;
    for (int64_t j = threadIdx.x; j < f; j += blockDim.x) s2 += (xr[j] - mu) * (xr[j] - mu);
    const float m = static_cast<float>(mu);
    const float is = static_cast<float>(1.0 / sqrt(block_sum(s2, shared) / static_cast<double>(f) + eps));
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = is;
    }
    for (int64_t j = threadIdx.x; j < f; j += blockDim.x)
      y[r * f + j] = (xr[j] - m) * is * (w ? w[j] : 1.0f) + (b ? b[j] : 0.0f);
  }
}

__global__ void __launch_bounds__(kSumThreads)
    layer_norm_grad_x_kernel(const float* dy, const float* x, const float* mean, const float* rstd, const float* w,
                             int64_t rows, int64_t f, float* dx) {
  __shared__ double shared[kSumThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const double mu = mean[r], is = rstd[r];
    double a = 0.0, b = 0.0;
    for (int64_t j = threadIdx.x; j < f; j += blockDim.x) {
      const double wdy = static_cast<double>(w ? w[j] : 1.0f) * dy[r * f + j];
      a += wdy;
      b += wdy * ((x[r * f + j] - mu) * is);
    }
    const double mean_a = block_sum(a, shared) / static_cast<double>(f);
    const double mean_b = block_sum(b, shared) / static_cast<double>(f);
    for (int64_t j = threadIdx.x; j < f; j += blockDim.x) {
      const double xhat = (x[r * f + j] - mu) * is;
      const double wdy = static_cast<double>(w ? w[j] : 1.0f) * dy[r * f + j];
      dx[r * f + j] = static_cast<float>(is * (wdy - mean_a - xhat * mean_b));
    }
  }
}

// One thread per feature, rows in order: the CPU's summation.
struct LayerNormParamGrads {
  const float *dy, *x, *mean, *rstd;
  int64_t rows, f;
  float *dw, *db;
  __device__ void operator()(int64_t j) const {
    double sdy = 0.0, sdy_xhat = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      const double g = dy[r * f + j];
      sdy += g;
      sdy_xhat += g * ((x[r * f + j] - static_cast<double>(mean[r])) * rstd[r]);
    }
    if (db) db[j] = static_cast<float>(sdy);
    if (dw) dw[j] = static_cast<float>(sdy_xhat);
  }
};

// ---- GELU ----

struct Gelu {
  const float* x;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f)); }
};

struct GeluBackward {
  const float *g, *x;
  float* gi;
  __device__ void operator()(int64_t i) const {
    const float v = x[i];
    const float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
    const float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
    gi[i] = g[i] * (cdf + v * pdf);
  }
};

// ---- attention ----

// Positions in (B, T, H * Dh) tensors; bh = b * H + h.
struct Heads {
  int64_t b, t, h, dh;
  float scale;
  __host__ __device__ int64_t row() const { return h * dh; }
  // Where head bh's position s starts.
  __host__ __device__ int64_t at(int64_t bh, int64_t s) const { return (bh / h * t + s) * row() + bh % h * dh; }
};

Heads heads_of(const Tensor& q, int64_t heads) {
  const int64_t dh = q.size(2) / heads;
  return {q.size(0), q.size(1), heads, dh, static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh)))};
}

__device__ float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// Block per query row (bh, t): p[s] = softmax over s <= t, then out = p v.
__global__ void __launch_bounds__(kSumThreads)
    attention_forward_kernel(const float* q, const float* k, const float* v, Heads g, float* out, float* lse) {
  extern __shared__ float p[];
  __shared__ float fshared[kSumThreads];
  __shared__ double dshared[kSumThreads];
  const int64_t row = blockIdx.x, bh = row / g.t, t = row % g.t;
  const float* qt = q + g.at(bh, t);
  float m = -FLT_MAX;
  for (int64_t s = threadIdx.x; s <= t; s += blockDim.x) {
    p[s] = g.scale * dot(qt, k + g.at(bh, s), g.dh);
    m = fmaxf(m, p[s]);
  }
  m = block_max(m, fshared);
  double sum = 0.0;
  for (int64_t s = threadIdx.x; s <= t; s += blockDim.x) {
    p[s] = expf(p[s] - m);
    sum += p[s];
  }
  sum = block_sum(sum, dshared);  // its barriers make p visible to the block
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t s = threadIdx.x; s <= t; s += blockDim.x) p[s] *= inv;
  if (threadIdx.x == 0) lse[row] = m + static_cast<float>(log(sum));
  __syncthreads();
  for (int64_t d = threadIdx.x; d < g.dh; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t s = 0; s <= t; ++s) acc += p[s] * v[g.at(bh, s) + d];
    out[g.at(bh, t) + d] = acc;
  }
}

// Block per query row (bh, t): dsum[row] = dO_t . O_t, ds over s <= t, dq_t = scale ds k.
__global__ void __launch_bounds__(kSumThreads)
    attention_grad_q_kernel(const float* dout, const float* q, const float* k, const float* v, const float* out,
                            const float* lse, Heads g, float* dsum, float* dq) {
  extern __shared__ float ds[];
  __shared__ double dshared[kSumThreads];
  const int64_t row = blockIdx.x, bh = row / g.t, t = row % g.t;
  const int64_t at = g.at(bh, t);
  double partial = 0.0;
  for (int64_t d = threadIdx.x; d < g.dh; d += blockDim.x) partial += static_cast<double>(dout[at + d]) * out[at + d];
  const float dt = static_cast<float>(block_sum(partial, dshared));
  if (threadIdx.x == 0) dsum[row] = dt;
  for (int64_t s = threadIdx.x; s <= t; s += blockDim.x) {
    const float pr = expf(g.scale * dot(q + at, k + g.at(bh, s), g.dh) - lse[row]);
    ds[s] = pr * (dot(dout + at, v + g.at(bh, s), g.dh) - dt);
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < g.dh; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t s = 0; s <= t; ++s) acc += ds[s] * k[g.at(bh, s) + d];
    dq[at + d] = g.scale * acc;
  }
}

// Block per key row (bh, s): over queries t >= s, dv_s = sum P dO_t, dk_s = scale sum dS q_t.
__global__ void __launch_bounds__(kSumThreads)
    attention_grad_kv_kernel(const float* dout, const float* q, const float* k, const float* v, const float* lse,
                             const float* dsum, Heads g, float* dk, float* dv) {
  extern __shared__ float buf[];  // P then dS, T - s values each
  const int64_t row = blockIdx.x, bh = row / g.t, s = row % g.t, n = g.t - s;
  float *p = buf, *ds = buf + n;
  const int64_t at = g.at(bh, s);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t t = s + i, qt = g.at(bh, t);
    const float pr = expf(g.scale * dot(q + qt, k + at, g.dh) - lse[bh * g.t + t]);
    p[i] = pr;
    ds[i] = pr * (dot(dout + qt, v + at, g.dh) - dsum[bh * g.t + t]);
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < g.dh; d += blockDim.x) {
    float acc_v = 0.0f, acc_k = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t qt = g.at(bh, s + i);
      acc_v += p[i] * dout[qt + d];
      acc_k += ds[i] * q[qt + d];
    }
    dv[at + d] = acc_v;
    dk[at + d] = g.scale * acc_k;
  }
}

// Lets `kernel` use `bytes` of dynamic shared memory, past the 48 KB default where the
// device allows; refuses a sequence too long for the device.
template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes, const Tensor& on, const char* name) {
  const cudaDeviceProp& props = context_of(on).props;
  cudaFuncAttributes attr{};
  QUARTET_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  if (bytes + attr.sharedSizeBytes > props.sharedMemPerBlockOptin)
    throw std::runtime_error(std::string(name) + ": the sequence needs " +
                             std::to_string(bytes + attr.sharedSizeBytes) +
                             " bytes of shared memory per block; this device has " +
                             std::to_string(props.sharedMemPerBlockOptin));
  QUARTET_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace

// ---- embedding ----

void embedding(const Tensor& indices, const Tensor& weight, Tensor& out) {
  for_each(out.numel(), EmbeddingRows{indices.device_data(), weight.device_data(), weight.size(1), out.device_data()},
           stream_of(out), "embedding");
}

void embedding_backward(const Tensor& grad_out, const Tensor& indices, Tensor& grad_weight) {
  const int64_t n = indices.numel(), rows = grad_weight.size(0);
  std::vector<float> idx(n);
  if (n > 0) download(indices.device(), indices.device_data(), idx.data(), sizeof(float) * n);
  // A stable counting sort: offsets (rows + 1), then the positions of each row in order.
  std::vector<int64_t> table(rows + 1 + n, 0);
  for (float v : idx) ++table[static_cast<int64_t>(v) + 1];
  for (int64_t r = 0; r < rows; ++r) table[r + 1] += table[r];
  std::vector<int64_t> next(table.begin(), table.begin() + rows);
  for (int64_t i = 0; i < n; ++i) table[rows + 1 + next[static_cast<int64_t>(idx[i])]++] = i;
  Workspace scratch(grad_weight.device(), sizeof(int64_t) * table.size());
  auto* dev = static_cast<int64_t*>(scratch.data());
  upload(grad_weight.device(), table.data(), dev, sizeof(int64_t) * table.size());
  for_each(grad_weight.numel(),
           EmbeddingGrad{grad_out.device_data(), dev, dev + rows + 1, grad_weight.size(1), grad_weight.device_data()},
           stream_of(grad_weight), "embedding_backward");
}

// ---- layer norm ----

void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y,
                        Tensor& mean, Tensor& rstd) {
  const int64_t f = x.size(-1), rows = x.numel() / f;
  layer_norm_forward_kernel<<<row_blocks(rows), kSumThreads, 0, stream_of(x)>>>(
      x.device_data(), data_or_null(weight), data_or_null(bias), eps, rows, f, y.device_data(), mean.device_data(),
      rstd.device_data());
  QUARTET_CUDA_LAUNCHED("layer_norm_forward");
}

void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) {
  const int64_t f = x.size(-1), rows = x.numel() / f;
  const cudaStream_t stream = stream_of(x);
  if (grad_x.defined()) {
    layer_norm_grad_x_kernel<<<row_blocks(rows), kSumThreads, 0, stream>>>(
        grad_out.device_data(), x.device_data(), mean.device_data(), rstd.device_data(), data_or_null(weight), rows,
        f, grad_x.device_data());
    QUARTET_CUDA_LAUNCHED("layer_norm_backward input");
  }
  if (grad_weight.defined() || grad_bias.defined())
    for_each(f,
             LayerNormParamGrads{grad_out.device_data(), x.device_data(), mean.device_data(), rstd.device_data(),
                                 rows, f, data_or_null(grad_weight), data_or_null(grad_bias)},
             stream, "layer_norm_backward parameters");
}

// ---- GELU ----

void gelu(const Tensor& x, Tensor& out) {
  for_each(out.numel(), Gelu{x.device_data(), out.device_data()}, stream_of(out), "gelu");
}

void gelu_backward(const Tensor& grad_out, const Tensor& x, Tensor& grad_in) {
  for_each(grad_in.numel(), GeluBackward{grad_out.device_data(), x.device_data(), grad_in.device_data()},
           stream_of(grad_in), "gelu_backward");
}

// ---- attention ----

void causal_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, Tensor& out,
                              Tensor& lse) {
  const Heads g = heads_of(q, heads);
  const size_t bytes = sizeof(float) * g.t;
  allow_shared(attention_forward_kernel, bytes, q, "causal_attention_forward");
  attention_forward_kernel<<<row_blocks(g.b * g.h * g.t), kSumThreads, bytes, stream_of(q)>>>(
      q.device_data(), k.device_data(), v.device_data(), g, out.device_data(), lse.device_data());
  QUARTET_CUDA_LAUNCHED("causal_attention_forward");
}

void causal_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& out, const Tensor& lse, int64_t heads, Tensor& grad_q,
                               Tensor& grad_k, Tensor& grad_v) {
  const Heads g = heads_of(q, heads);
  const int64_t rows = g.b * g.h * g.t;
  const cudaStream_t stream = stream_of(q);
  Workspace dsum(q.device(), sizeof(float) * rows);
  const size_t q_bytes = sizeof(float) * g.t, kv_bytes = 2 * sizeof(float) * g.t;
  allow_shared(attention_grad_q_kernel, q_bytes, q, "causal_attention_backward");
  allow_shared(attention_grad_kv_kernel, kv_bytes, q, "causal_attention_backward");
  attention_grad_q_kernel<<<row_blocks(rows), kSumThreads, q_bytes, stream>>>(
      grad_out.device_data(), q.device_data(), k.device_data(), v.device_data(), out.device_data(), lse.device_data(),
      g, static_cast<float*>(dsum.data()), grad_q.device_data());
  QUARTET_CUDA_LAUNCHED("causal_attention_backward q");
  attention_grad_kv_kernel<<<row_blocks(rows), kSumThreads, kv_bytes, stream>>>(
      grad_out.device_data(), q.device_data(), k.device_data(), v.device_data(), lse.device_data(),
      static_cast<float*>(dsum.data()), g, grad_k.device_data(), grad_v.device_data());
  QUARTET_CUDA_LAUNCHED("causal_attention_backward k v");
}

}  // namespace quartet::engine::cuda

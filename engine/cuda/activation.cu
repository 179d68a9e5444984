#include "engine/cuda/activation.h"

#include <vector>

#include "engine/cuda/map_reduce.cuh"
#include "engine/cuda/runtime.h"

namespace quartet::engine::cuda {
namespace {

struct LeakyRelu {
  const float* x;
  float slope;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = x[i] > 0.0f ? x[i] : slope * x[i]; }
};

struct LeakyReluBackward {
  const float *g, *x;
  float slope;
  float* gi;
  __device__ void operator()(int64_t i) const { gi[i] = x[i] > 0.0f ? g[i] : slope * g[i]; }
};

// exp of a non-positive number only: no overflow for large |x|; NaN gives NaN.
struct Sigmoid {
  const float* x;
  float* out;
  __device__ void operator()(int64_t i) const {
    const float v = x[i];
    const float e = expf(-fabsf(v));
    out[i] = v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
  }
};

struct SigmoidBackward {
  const float *g, *y;
  float* gi;
  __device__ void operator()(int64_t i) const { gi[i] = g[i] * y[i] * (1.0f - y[i]); }
};

struct Tanh {
  const float* x;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = tanhf(x[i]); }
};

struct TanhBackward {
  const float *g, *y;
  float* gi;
  __device__ void operator()(int64_t i) const { gi[i] = g[i] * (1.0f - y[i] * y[i]); }
};

struct Erf {
  const float* x;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = erff(x[i]); }
};

struct ErfBackward {
  const float *g, *x;
  float* gi;
  __device__ void operator()(int64_t i) const { gi[i] = g[i] * 1.12837916709551257f * expf(-x[i] * x[i]); }
};

struct ApplyMask {
  const float *x, *mask;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = x[i] * mask[i]; }
};

}  // namespace

void leaky_relu(const Tensor& x, float slope, Tensor& out) {
  for_each(out.numel(), LeakyRelu{x.device_data(), slope, out.device_data()}, stream_of(out), "leaky_relu");
}

void leaky_relu_backward(const Tensor& grad_out, const Tensor& x, float slope, Tensor& grad_in) {
  for_each(grad_in.numel(), LeakyReluBackward{grad_out.device_data(), x.device_data(), slope, grad_in.device_data()},
           stream_of(grad_in), "leaky_relu_backward");
}

void sigmoid(const Tensor& x, Tensor& out) {
  for_each(out.numel(), Sigmoid{x.device_data(), out.device_data()}, stream_of(out), "sigmoid");
}

void sigmoid_backward(const Tensor& grad_out, const Tensor& out, Tensor& grad_in) {
  for_each(grad_in.numel(), SigmoidBackward{grad_out.device_data(), out.device_data(), grad_in.device_data()},
           stream_of(grad_in), "sigmoid_backward");
}

void tanh(const Tensor& x, Tensor& out) {
  for_each(out.numel(), Tanh{x.device_data(), out.device_data()}, stream_of(out), "tanh");
}

void tanh_backward(const Tensor& grad_out, const Tensor& out, Tensor& grad_in) {
  for_each(grad_in.numel(), TanhBackward{grad_out.device_data(), out.device_data(), grad_in.device_data()},
           stream_of(grad_in), "tanh_backward");
}

void erf(const Tensor& x, Tensor& out) {
  for_each(out.numel(), Erf{x.device_data(), out.device_data()}, stream_of(out), "erf");
}

void erf_backward(const Tensor& grad_out, const Tensor& x, Tensor& grad_in) {
  for_each(grad_in.numel(), ErfBackward{grad_out.device_data(), x.device_data(), grad_in.device_data()},
           stream_of(grad_in), "erf_backward");
}

void dropout(const Tensor& x, float p, Generator& gen, Tensor& mask, Tensor& out) {
  const float keep_scale = 1.0f / (1.0f - p);
  const int64_t n = out.numel();
  std::vector<float> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[i] = gen.uniform(0.0f, 1.0f) < p ? 0.0f : keep_scale;
  if (n > 0) upload(mask.device(), host.data(), mask.device_data(), sizeof(float) * host.size());
  for_each(n, ApplyMask{x.device_data(), mask.device_data(), out.device_data()}, stream_of(out), "dropout");
}

}  // namespace quartet::engine::cuda

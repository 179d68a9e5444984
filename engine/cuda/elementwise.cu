#include "engine/cuda/elementwise.h"

#include <cuda_fp16.h>

#include "engine/cpu/elementwise.h"
#include "engine/cuda/map_reduce.cuh"
#include "engine/cuda/runtime.h"

namespace quartet::engine::cuda {
namespace {

struct Fill {
  float* out;
  float value;
  __device__ void operator()(int64_t i) const { out[i] = value; }
};

struct Add {
  const float *a, *b;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = a[i] + b[i]; }
};

struct Axpy {
  float* acc;
  const float* x;
  float alpha;
  __device__ void operator()(int64_t i) const { acc[i] += alpha * x[i]; }
};

struct Mul {
  const float *a, *b;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = a[i] * b[i]; }
};

// a and out may be one buffer (scale_).
struct Scale {
  const float* a;
  float s;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = s * a[i]; }
};

// NaN passes through, as on the CPU (x <= 0 is false for NaN).
// One thread a 32-element word of the mask (see cpu::relu_mask_words); mask may be null.
struct Relu {
  const float* x;
  float* out;
  uint32_t* mask;
  int64_t n;
  __device__ void operator()(int64_t w) const {
    const int64_t i0 = w * 32, i1 = i0 + 32 < n ? i0 + 32 : n;
    uint32_t bits = 0;
    for (int64_t i = i0; i < i1; ++i) {
      out[i] = x[i] <= 0.0f ? 0.0f : x[i];  // NaN passes through
      bits |= static_cast<uint32_t>(x[i] > 0.0f) << (i - i0);
    }
    if (mask) mask[w] = bits;
  }
};

// gi may be g itself.
struct ReluBackward {
  const float* g;
  const uint32_t* mask;
  float* gi;
  int64_t n;
  __device__ void operator()(int64_t w) const {
    const int64_t i0 = w * 32, i1 = i0 + 32 < n ? i0 + 32 : n;
    const uint32_t bits = mask[w];
    for (int64_t i = i0; i < i1; ++i) gi[i] = (bits >> (i - i0)) & 1u ? g[i] : 0.0f;
  }
};

struct RoundToHalf {
  float* p;
  __device__ void operator()(int64_t i) const { p[i] = __half2float(__float2half_rn(p[i])); }
};

struct FillFromScalar {
  const float* scalar;
  float factor;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = factor * scalar[0]; }
};

struct Value {
  const float* p;
  __device__ double operator()(int64_t i) const { return p[i]; }
};

struct Square {
  const float* p;
  __device__ double operator()(int64_t i) const { return static_cast<double>(p[i]) * p[i]; }
};

size_t float_bytes(int64_t count) { return sizeof(float) * static_cast<size_t>(count); }

}  // namespace

void fill(Tensor& out, float value) {
  for_each(out.numel(), Fill{out.device_data(), value}, stream_of(out), "fill");
}

void copy(const Tensor& src, Tensor& out) {
  const size_t bytes = float_bytes(src.numel());
  if (bytes == 0) return;
  const Device from = src.device(), to = out.device();
  if (from.is_cpu()) {
    upload(to, src.device_data(), out.device_data(), bytes);
  } else if (to.is_cpu()) {
    download(from, src.device_data(), out.device_data(), bytes);
  } else if (from == to) {
    QUARTET_CUDA_CHECK(cudaMemcpyAsync(out.device_data(), src.device_data(), bytes, cudaMemcpyDeviceToDevice,
                                       stream_of(out)));
  } else {
    // Two GPUs: src's writes are finished first, and the copy is waited for, since
    // neither stream orders the other's later work on these buffers.
    synchronize(from);
    const cudaStream_t stream = stream_of(out);
    QUARTET_CUDA_CHECK(cudaMemcpyPeerAsync(out.device_data(), to.index, src.device_data(), from.index, bytes, stream));
    QUARTET_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  for_each(out.numel(), Add{a.device_data(), b.device_data(), out.device_data()}, stream_of(out), "add");
}

void add_(Tensor& acc, const Tensor& x, float alpha) {
  for_each(acc.numel(), Axpy{acc.device_data(), x.device_data(), alpha}, stream_of(acc), "add_");
}

void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  for_each(out.numel(), Mul{a.device_data(), b.device_data(), out.device_data()}, stream_of(out), "mul");
}

void scale(const Tensor& a, float s, Tensor& out) {
  for_each(out.numel(), Scale{a.device_data(), s, out.device_data()}, stream_of(out), "scale");
}

void relu(const Tensor& x, Tensor& out, Tensor& mask) {
  uint32_t* m = mask.defined() ? reinterpret_cast<uint32_t*>(mask.device_data()) : nullptr;
  for_each(cpu::relu_mask_words(out.numel()), Relu{x.device_data(), out.device_data(), m, out.numel()},
           stream_of(out), "relu");
}

void relu_backward(const Tensor& grad_out, const Tensor& mask, Tensor& grad_in) {
  for_each(cpu::relu_mask_words(grad_in.numel()),
           ReluBackward{grad_out.device_data(), reinterpret_cast<const uint32_t*>(mask.device_data()),
                        grad_in.device_data(), grad_in.numel()},
           stream_of(grad_in), "relu_backward");
}

float sum(const Tensor& x) {
  return static_cast<float>(sum_to_host(x.device(), x.numel(), Value{x.device_data()}, stream_of(x)));
}

double sum_squares(const Tensor& x) {
  return sum_to_host(x.device(), x.numel(), Square{x.device_data()}, stream_of(x));
}

void copy_range(Tensor& dst, int64_t dst_offset, const Tensor& src, int64_t src_offset, int64_t count) {
  if (count <= 0) return;
  QUARTET_CUDA_CHECK(cudaMemcpyAsync(dst.device_data() + dst_offset, src.device_data() + src_offset,
                                     float_bytes(count), cudaMemcpyDeviceToDevice, stream_of(dst)));
}

void fill_range(Tensor& t, int64_t offset, int64_t count, float value) {
  for_each(count, Fill{t.device_data() + offset, value}, stream_of(t), "fill_range");
}

void round_to_half(Tensor& t, int64_t offset, int64_t count) {
  for_each(count, RoundToHalf{t.device_data() + offset}, stream_of(t), "round_to_half");
}

void fill_from_scalar(const Tensor& scalar, float factor, Tensor& out) {
  for_each(out.numel(), FillFromScalar{scalar.device_data(), factor, out.device_data()}, stream_of(out),
           "fill_from_scalar");
}

}  // namespace quartet::engine::cuda

#include "engine/cuda/broadcast.h"

#include "engine/cuda/map_reduce.cuh"
#include "engine/cuda/runtime.h"

namespace quartet::engine::cuda {
namespace {

struct StridedCopy {
  const float* x;
  StridedMap map;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = x[strided_offset(map, i)]; }
};

struct Binary {
  BinaryKind kind;
  const float* a;
  StridedMap ma;
  const float* b;
  StridedMap mb;
  float* out;
  __device__ void operator()(int64_t i) const {
    out[i] = apply_binary(kind, a[strided_offset(ma, i)], b[strided_offset(mb, i)]);
  }
};

struct StridedSum {
  const float* x;
  StridedMap outer, inner;
  int64_t count;
  float* out;
  __device__ void operator()(int64_t j) const {
    const int64_t base = strided_offset(outer, j) - inner.base;
    float s = 0.0f;
    for (int64_t k = 0; k < count; ++k) s += x[base + strided_offset(inner, k)];
    out[j] = s;
  }
};

struct Pad {
  const float* x;
  PadMap map;
  float value;
  float* out;
  __device__ void operator()(int64_t i) const {
    const int64_t src = pad_source(map, i);
    out[i] = src < 0 ? value : x[src];
  }
};

struct Where {
  const float* c;
  StridedMap mc;
  const float* a;
  StridedMap ma;
  const float* b;
  StridedMap mb;
  float* out;
  __device__ void operator()(int64_t i) const {
    out[i] = c[strided_offset(mc, i)] != 0.0f ? a[strided_offset(ma, i)] : b[strided_offset(mb, i)];
  }
};

// NaN passes through, as on the CPU (both comparisons are false).
struct Clip {
  const float* x;
  float lo, hi;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]); }
};

struct ClipBackward {
  const float *g, *x;
  float lo, hi;
  float* gi;
  __device__ void operator()(int64_t i) const { gi[i] = x[i] >= lo && x[i] <= hi ? g[i] : 0.0f; }
};

}  // namespace

void strided_copy(const Tensor& x, const StridedMap& map, Tensor& out) {
  for_each(out.numel(), StridedCopy{x.device_data(), map, out.device_data()}, stream_of(out), "strided_copy");
}

void broadcast_binary(BinaryKind kind, const Tensor& a, const StridedMap& ma, const Tensor& b,
                      const StridedMap& mb, Tensor& out) {
  for_each(out.numel(), Binary{kind, a.device_data(), ma, b.device_data(), mb, out.device_data()}, stream_of(out),
           "broadcast_binary");
}

void strided_sum(const Tensor& x, const StridedMap& outer, const StridedMap& inner, int64_t count, Tensor& out) {
  for_each(out.numel(), StridedSum{x.device_data(), outer, inner, count, out.device_data()}, stream_of(out),
           "strided_sum");
}

void pad(const Tensor& x, const PadMap& map, float value, Tensor& out) {
  for_each(out.numel(), Pad{x.device_data(), map, value, out.device_data()}, stream_of(out), "pad");
}

void where(const Tensor& c, const StridedMap& mc, const Tensor& a, const StridedMap& ma, const Tensor& b,
           const StridedMap& mb, Tensor& out) {
  for_each(out.numel(), Where{c.device_data(), mc, a.device_data(), ma, b.device_data(), mb, out.device_data()},
           stream_of(out), "where");
}

void clip(const Tensor& x, float lo, float hi, Tensor& out) {
  for_each(out.numel(), Clip{x.device_data(), lo, hi, out.device_data()}, stream_of(out), "clip");
}

void clip_backward(const Tensor& grad_out, const Tensor& x, float lo, float hi, Tensor& grad_in) {
  for_each(grad_in.numel(), ClipBackward{grad_out.device_data(), x.device_data(), lo, hi, grad_in.device_data()},
           stream_of(grad_in), "clip_backward");
}

}  // namespace quartet::engine::cuda

#include "engine/cuda/upsample.h"

#include "engine/cuda/map_reduce.cuh"
#include "engine/cuda/runtime.h"
#include "engine/cuda/upsample_index.h"

namespace quartet::engine::cuda {
namespace {

// Index k over (plane, output cell).
struct UpsampleForward {
  UpsampleGeometry g;
  const float* x;
  float* out;
  __device__ void operator()(int64_t k) const {
    const int64_t plane = k / g.out_size;
    out[k] = upsample_forward_at(g, x + plane * g.in_size, k - plane * g.out_size);
  }
};

// Index k over (plane, input cell).
struct UpsampleBackward {
  UpsampleGeometry g;
  const float* grad_out;
  float* grad_x;
  __device__ void operator()(int64_t k) const {
    const int64_t plane = k / g.in_size;
    grad_x[k] = upsample_backward_at(g, grad_out + plane * g.out_size, k - plane * g.in_size);
  }
};

UpsampleGeometry geometry(const Tensor& in, const Tensor& out, UpsampleMode mode) {
  return upsample_geometry(in.shape().data(), out.shape().data(), in.dim(), mode == UpsampleMode::linear);
}

}  // namespace

void upsample_forward(const Tensor& x, UpsampleMode mode, Tensor& out) {
  for_each(out.numel(), UpsampleForward{geometry(x, out, mode), x.device_data(), out.device_data()}, stream_of(out),
           "upsample_forward");
}

void upsample_backward(const Tensor& grad_out, UpsampleMode mode, Tensor& grad_x) {
  for_each(grad_x.numel(), UpsampleBackward{geometry(grad_x, grad_out, mode), grad_out.device_data(),
                                            grad_x.device_data()},
           stream_of(grad_x), "upsample_backward");
}

}  // namespace quartet::engine::cuda

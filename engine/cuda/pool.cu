#include "engine/cuda/pool.h"

#include "engine/cuda/pool_index.h"
#include "engine/cuda/runtime.h"
#include "engine/cuda/segment_sum.cuh"

namespace quartet::engine::cuda {
namespace {

// One thread per output cell (planes * out_size of them); a may be null.
__global__ void max_pool_kernel(PoolGeometry g, const float* x, float* y, float* a, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t plane = i / g.out_size, o = i % g.out_size;
    int64_t arg = -1;
    y[i] = max_pool_window(g, x + plane * g.in_size, o, arg);
    if (a) a[i] = static_cast<float>(arg);
  }
}

// One thread per input cell (planes * in_size of them).
__global__ void max_pool_backward_kernel(PoolGeometry g, const float* gy, const float* a, float* dx,
                                         int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t plane = i / g.in_size;
    dx[i] = max_pool_input_grad(g, gy + plane * g.out_size, a + plane * g.out_size, i % g.in_size);
  }
}

__global__ void avg_pool_kernel(PoolGeometry g, const float* x, float* y, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x)
    y[i] = avg_pool_window(g, x + i / g.out_size * g.in_size, i % g.out_size);
}

__global__ void avg_pool_backward_kernel(PoolGeometry g, const float* gy, float* dx, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x)
    dx[i] = avg_pool_input_grad(g, gy + i / g.in_size * g.out_size, i % g.in_size);
}

// Cell j of plane s of a (planes, cells) array.
struct PlaneTerm {
  const float* x;
  int64_t cells;
  __device__ double2 operator()(int64_t s, int64_t j) const { return make_double2(x[s * cells + j], 0.0); }
};

__global__ void plane_means_kernel(const double2* totals, int64_t planes, int64_t cells, float* y) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < planes; p += int64_t{blockDim.x} * gridDim.x)
    y[p] = static_cast<float>(totals[p].x / static_cast<double>(cells));
}

__global__ void spread_kernel(const float* gy, int64_t cells, float inv_cells, float* dx, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x)
    dx[i] = gy[i / cells] * inv_cells;
}

PoolGeometry geometry(const Shape& in, const Shape& out, const PoolOptions& opt) {
  return pool_geometry(in, out, opt.kernel, opt.stride, opt.padding);
}

}  // namespace

void max_pool_forward(const Tensor& x, const PoolOptions& opt, Tensor& out, Tensor& argmax) {
  const PoolGeometry g = geometry(x.shape(), out.shape(), opt);
  const int64_t total = out.numel();
  if (total == 0) return;
  max_pool_kernel<<<blocks_for(total), kThreads, 0, stream_of(x)>>>(
      g, x.device_data(), out.device_data(), argmax.defined() ? argmax.device_data() : nullptr, total);
  QUARTET_CUDA_LAUNCHED("max_pool_forward");
}

void max_pool_backward(const Tensor& grad_out, const Tensor& argmax, const PoolOptions& opt, Tensor& grad_x) {
  const PoolGeometry g = geometry(grad_x.shape(), grad_out.shape(), opt);
  const int64_t total = grad_x.numel();
  if (total == 0) return;
  max_pool_backward_kernel<<<blocks_for(total), kThreads, 0, stream_of(grad_x)>>>(
      g, grad_out.device_data(), argmax.device_data(), grad_x.device_data(), total);
  QUARTET_CUDA_LAUNCHED("max_pool_backward");
}

void avg_pool_forward(const Tensor& x, const PoolOptions& opt, Tensor& out) {
  const PoolGeometry g = geometry(x.shape(), out.shape(), opt);
  const int64_t total = out.numel();
  if (total == 0) return;
  avg_pool_kernel<<<blocks_for(total), kThreads, 0, stream_of(x)>>>(g, x.device_data(), out.device_data(), total);
  QUARTET_CUDA_LAUNCHED("avg_pool_forward");
}

void avg_pool_backward(const Tensor& grad_out, const PoolOptions& opt, Tensor& grad_x) {
  const PoolGeometry g = geometry(grad_x.shape(), grad_out.shape(), opt);
  const int64_t total = grad_x.numel();
  if (total == 0) return;
  avg_pool_backward_kernel<<<blocks_for(total), kThreads, 0, stream_of(grad_x)>>>(g, grad_out.device_data(),
                                                                                grad_x.device_data(), total);
  QUARTET_CUDA_LAUNCHED("avg_pool_backward");
}

void global_avg_pool_forward(const Tensor& x, Tensor& out) {
  const int64_t planes = out.numel();
  if (planes == 0) return;
  const int64_t cells = x.numel() / planes;
  const cudaStream_t stream = stream_of(x);
  Workspace totals(x.device(), static_cast<size_t>(planes) * sizeof(double2));
  auto* t = static_cast<double2*>(totals.data());
  segment_sums(x.device(), stream, PlaneTerm{x.device_data(), cells}, planes, cells, t);
  plane_means_kernel<<<blocks_for(planes), kThreads, 0, stream>>>(t, planes, cells, out.device_data());
  QUARTET_CUDA_LAUNCHED("global_avg_pool_forward");
}

void global_avg_pool_backward(const Tensor& grad_out, Tensor& grad_x) {
  const int64_t planes = grad_out.numel(), total = grad_x.numel();
  if (planes == 0 || total == 0) return;
  const int64_t cells = total / planes;
  spread_kernel<<<blocks_for(total), kThreads, 0, stream_of(grad_x)>>>(
      grad_out.device_data(), cells, 1.0f / static_cast<float>(cells), grad_x.device_data(), total);
  QUARTET_CUDA_LAUNCHED("global_avg_pool_backward");
}

}  // namespace quartet::engine::cuda

#include "engine/cuda/segment_sum.cuh"

namespace quartet::engine::cuda {
namespace {

__global__ void add_parts(const double2* partials, int64_t segments, int64_t parts, double2* totals) {
  for (int64_t s = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; s < segments; s += int64_t{blockDim.x} * gridDim.x) {
    double2 v = make_double2(0.0, 0.0);
    for (int64_t q = 0; q < parts; ++q) v = add_double2(v, partials[s * parts + q]);
    totals[s] = v;
  }
}

// Element j of channel s of a (N, C, L) array.
struct ChannelTerm {
  const float* p;
  Planes planes;
  __device__ double2 operator()(int64_t s, int64_t j) const {
    return make_double2(p[channel_element(planes, s, j)], 0.0);
  }
};

__global__ void store_first_sums(const double2* totals, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    out[i] = static_cast<float>(totals[i].x);
}

}  // namespace

void add_segment_parts(const double2* partials, int64_t segments, int64_t parts, double2* totals,
                       cudaStream_t stream) {
  add_parts<<<blocks_for(segments), kThreads, 0, stream>>>(partials, segments, parts, totals);
  QUARTET_CUDA_LAUNCHED("add_parts");
}

void channel_sums(const Device& device, cudaStream_t stream, const float* x, const Planes& planes, float* out) {
  if (planes.c <= 0) return;
  Workspace totals(device, static_cast<size_t>(planes.c) * sizeof(double2));
  auto* t = static_cast<double2*>(totals.data());
  segment_sums(device, stream, ChannelTerm{x, planes}, planes.c, planes.n * planes.l, t);
  store_first_sums<<<blocks_for(planes.c), kThreads, 0, stream>>>(t, planes.c, out);
  QUARTET_CUDA_LAUNCHED("store_first_sums");
}

}  // namespace quartet::engine::cuda

#pragma once

// Deterministic sums for the CUDA kernels: many segments (channels, groups, planes) of
// `count` elements each, two double sums per segment. Each segment is cut into the
// parts norm_index.h fixes from the count, each part summed by one block in a fixed tree,
// the parts added in order: the same bits on every run, with no atomics. CUDA source;
// included by the .cu files of engine/cuda/.

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <stdexcept>

#include "engine/cuda/norm_index.h"
#include "engine/cuda/runtime.h"

namespace quartet::engine::cuda {

__device__ inline double2 add_double2(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }

// The sum of v over the block (kThreads threads) in a fixed tree order, for every thread.
// Called once per kernel: the buffer is not guarded for reuse.
__device__ inline double2 block_sum2(double2 v) {
  __shared__ double2 buf[kThreads];
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) buf[threadIdx.x] = add_double2(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  return buf[0];
}

// Block b sums part b % parts of segment b / parts; term(segment, j) gives element j's
// two values. out: (segments * parts).
template <class Term>
__global__ void segment_part_sums(Term term, int64_t count, int64_t parts, double2* out) {
  const int64_t seg = blockIdx.x / parts, q = blockIdx.x % parts;
  const int64_t end = part_begin(count, parts, q + 1);
  double2 v = make_double2(0.0, 0.0);
  for (int64_t j = part_begin(count, parts, q) + threadIdx.x; j < end; j += blockDim.x)
    v = add_double2(v, term(seg, j));
  v = block_sum2(v);
  if (threadIdx.x == 0) out[blockIdx.x] = v;
}

// totals (segments) = the parts (segments, parts) of each segment added in part order.
void add_segment_parts(const double2* partials, int64_t segments, int64_t parts, double2* totals,
                       cudaStream_t stream);

// totals (segments, device memory) = per segment the sums over j < count of term(s, j),
// queued on `stream`. Term: a trivially copyable functor with
// __device__ double2 operator()(int64_t segment, int64_t j) const.
template <class Term>
void segment_sums(const Device& device, cudaStream_t stream, const Term& term, int64_t segments, int64_t count,
                  double2* totals) {
  if (segments <= 0) return;
  const int64_t parts = parts_for(count);
  if (segments * parts > INT_MAX) throw std::runtime_error("segment_sums: too many segments for one launch");
  const unsigned blocks = static_cast<unsigned>(segments * parts);
  if (parts == 1) {
    segment_part_sums<<<blocks, kThreads, 0, stream>>>(term, count, parts, totals);
    QUARTET_CUDA_LAUNCHED("segment_part_sums");
    return;
  }
  Workspace partials(device, static_cast<size_t>(segments * parts) * sizeof(double2));
  auto* p = static_cast<double2*>(partials.data());
  segment_part_sums<<<blocks, kThreads, 0, stream>>>(term, count, parts, p);
  QUARTET_CUDA_LAUNCHED("segment_part_sums");
  add_segment_parts(p, segments, parts, totals, stream);
}

// out (C) = the sum of x (N, C, L) over samples and positions per channel (bias
// gradients, column sums), deterministic. x, out: device memory on `device`.
void channel_sums(const Device& device, cudaStream_t stream, const float* x, const Planes& planes, float* out);

}  // namespace quartet::engine::cuda

#pragma once

// Kernel shapes shared by the element-wise, activation, loss and optimizer kernels:
// one functor call per index over a grid-stride loop, and deterministic sums. CUDA only:
// included by .cu files.
//
// A sum runs over a fixed grid (kSumBlocks x kSumThreads, whatever the device), each
// thread adding its strided terms in order, each block folding its threads in a fixed
// tree, and one block folding the block partials the same way. The terms each thread
// and block sees depend only on n, so the result is the same on every run and every GPU:
// no atomics.
#include <cstdint>

#include "engine/cuda/runtime.h"

namespace quartet::engine::cuda {

inline constexpr int kSumBlocks = 512;
inline constexpr int kSumThreads = 256;

// fn(i) for i in [0, n).
template <class Fn>
__global__ void for_each_kernel(int64_t n, Fn fn) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) fn(i);
}

template <class Fn>
void for_each(int64_t n, const Fn& fn, cudaStream_t stream, const char* name) {
  if (n <= 0) return;
  for_each_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, fn);
  QUARTET_CUDA_LAUNCHED(name);
}

// The sum of v over the block's kSumThreads threads, in a fixed tree; every thread gets
// it. `shared` holds kSumThreads doubles; the trailing barrier lets a caller reuse it.
__device__ inline double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kSumThreads / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

// partials[block] = the block's share of sum_i term(i), i in [0, n).
template <class Term>
__global__ void __launch_bounds__(kSumThreads) partial_sums_kernel(int64_t n, Term term, double* partials) {
  __shared__ double shared[kSumThreads];
  const int64_t stride = static_cast<int64_t>(kSumBlocks) * kSumThreads;
  double acc = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kSumThreads + threadIdx.x; i < n; i += stride) acc += term(i);
  const double total = block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// finish(sum of the kSumBlocks partials), called by one thread.
template <class Finish>
__global__ void __launch_bounds__(kSumThreads) finish_sum_kernel(const double* partials, Finish finish) {
  __shared__ double shared[kSumThreads];
  double acc = 0.0;
  for (int i = threadIdx.x; i < kSumBlocks; i += kSumThreads) acc += partials[i];
  const double total = block_sum(acc, shared);
  if (threadIdx.x == 0) finish(total);
}

// Device scratch for one sum: the block partials, then one double for a result that
// goes back to the host.
inline constexpr size_t kSumScratchBytes = sizeof(double) * (kSumBlocks + 1);

// Queues finish(sum_i term(i)) on `stream`: term(i) (a double) is called once for each
// i in [0, n), and may write outputs of its own (the softmax of a loss). `scratch` has
// kSumScratchBytes.
template <class Term, class Finish>
void deterministic_sum(int64_t n, const Term& term, const Finish& finish, void* scratch, cudaStream_t stream) {
  double* partials = static_cast<double*>(scratch);
  partial_sums_kernel<<<kSumBlocks, kSumThreads, 0, stream>>>(n, term, partials);
  QUARTET_CUDA_LAUNCHED("partial_sums_kernel");
  finish_sum_kernel<<<1, kSumThreads, 0, stream>>>(partials, finish);
  QUARTET_CUDA_LAUNCHED("finish_sum_kernel");
}

// A finish that stores the sum where the host reads it back (scratch's last double).
struct StoreSum {
  double* out;
  __device__ void operator()(double total) const { *out = total; }
};

// sum_i term(i) in double, back on the host (waits for the device).
template <class Term>
double sum_to_host(const Device& device, int64_t n, const Term& term, cudaStream_t stream) {
  Workspace scratch(device, kSumScratchBytes);
  double* result = static_cast<double*>(scratch.data()) + kSumBlocks;
  deterministic_sum(n, term, StoreSum{result}, scratch.data(), stream);
  double total = 0.0;
  download(device, result, &total, sizeof total);
  return total;
}

}  // namespace quartet::engine::cuda

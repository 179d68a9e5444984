#include "engine/cuda/dense.h"

#include <climits>
#include <stdexcept>
#include <string>

#include "engine/cuda/cublas_loader.h"
#include "engine/cuda/runtime.h"
#include "engine/cuda/segment_sum.cuh"

namespace quartet::engine::cuda {
namespace {

int blas_int(int64_t v, const char* what) {
  if (v > INT_MAX) throw std::runtime_error(std::string("gemm: ") + what + " exceeds cuBLAS's int range");
  return static_cast<int>(v);
}

// out (rows, cols) += bias (cols) on every row.
__global__ void add_bias_kernel(float* out, const float* bias, int64_t cols, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{blockDim.x} * gridDim.x)
    out[i] += bias[i % cols];
}

}  // namespace

// cuBLAS is column-major: the row-major (M, N) out is the column-major (N, M) out^T =
// op(b)^T op(a)^T, and a row-major (r, c) operand is its column-major transpose with
// leading dimension c. So b goes first, each operand keeps its own transpose flag.
void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out, float alpha, float beta) {
  const int m = blas_int(out.size(0), "M"), n = blas_int(out.size(1), "N");
  const int k = blas_int(trans_a ? a.size(0) : a.size(1), "K");
  if (m == 0 || n == 0) return;
  DeviceContext& ctx = context_of(out);
  if (k == 0) {  // op(a) op(b) is all zeros: out = beta * out, and no NaN survives beta = 0
    if (beta == 0.0f)
      QUARTET_CUDA_CHECK(cudaMemsetAsync(out.device_data(), 0, static_cast<size_t>(out.numel()) * sizeof(float),
                                         ctx.compute));
    else if (beta != 1.0f)
      QUARTET_CUDA_CHECK(cublas().sscal(ctx.cublas, blas_int(out.numel(), "M * N"), &beta, out.device_data(), 1));
    return;
  }
  const bool tf32 = allow_tf32();
  QUARTET_CUDA_CHECK(cublas().set_math_mode(ctx.cublas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  const int lda = blas_int(a.size(1), "lda"), ldb = blas_int(b.size(1), "ldb");
  QUARTET_CUDA_CHECK(cublas().gemm_ex(ctx.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  n, m, k, &alpha, b.device_data(), CUDA_R_32F, ldb,
                                  a.device_data(), CUDA_R_32F, lda, &beta, out.device_data(),
                                  CUDA_R_32F, n, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
}

void batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out) {
  const int64_t batch = out.size(0);
  const int m = blas_int(out.size(1), "M"), n = blas_int(out.size(2), "N");
  const int k = blas_int(trans_a ? a.size(1) : a.size(2), "K");
  if (batch == 0 || m == 0 || n == 0) return;
  DeviceContext& ctx = context_of(out);
  if (k == 0) {
    QUARTET_CUDA_CHECK(cudaMemsetAsync(out.device_data(), 0, static_cast<size_t>(out.numel()) * sizeof(float),
                                       ctx.compute));
    return;
  }
  const bool tf32 = allow_tf32();
  QUARTET_CUDA_CHECK(cublas().set_math_mode(ctx.cublas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  const int lda = blas_int(a.size(2), "lda"), ldb = blas_int(b.size(2), "ldb");
  const int64_t sa = a.size(1) * a.size(2), sb = b.size(1) * b.size(2), so = out.size(1) * out.size(2);
  const float alpha = 1.0f, beta = 0.0f;
  for (int64_t i = 0; i < batch; ++i)
    QUARTET_CUDA_CHECK(cublas().gemm_ex(ctx.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
                                        b.device_data() + i * sb, CUDA_R_32F, ldb, a.device_data() + i * sa,
                                        CUDA_R_32F, lda, &beta, out.device_data() + i * so, CUDA_R_32F, n,
                                        tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
}

void add_row_bias(Tensor& out, const Tensor& bias) {
  const int64_t total = out.numel();
  if (total == 0) return;
  add_bias_kernel<<<blocks_for(total), kThreads, 0, stream_of(out)>>>(out.device_data(), bias.device_data(),
                                                                      out.size(1), total);
  QUARTET_CUDA_LAUNCHED("add_row_bias");
}

// The columns of x (N, F) are the channels of (N, F, 1): per column a fixed-order double
// sum, rounded to float once.
void sum_rows(const Tensor& x, Tensor& out) {
  if (out.numel() == 0) return;
  Planes p;
  p.n = x.size(0);
  p.c = x.size(1);
  p.l = 1;
  channel_sums(out.device(), stream_of(out), x.device_data(), p, out.device_data());
}

}  // namespace quartet::engine::cuda

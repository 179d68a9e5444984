#include "engine/cpu/broadcast.h"

#include <Eigen/Core>

namespace quartet::engine::cpu {
namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapC = Eigen::Map<const RowMat>;
using Map = Eigen::Map<RowMat>;
}  // namespace

void strided_copy(const Tensor& x, const StridedMap& map, Tensor& out) {
  const float* px = x.data();
  float* po = out.data();
  const int64_t n = out.numel();
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) po[i] = px[cuda::strided_offset(map, i)];
}

void broadcast_binary(BinaryKind kind, const Tensor& a, const StridedMap& ma, const Tensor& b,
                      const StridedMap& mb, Tensor& out) {
  const float* pa = a.data();
  const float* pb = b.data();
  float* po = out.data();
  const int64_t n = out.numel();
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    po[i] = cuda::apply_binary(kind, pa[cuda::strided_offset(ma, i)], pb[cuda::strided_offset(mb, i)]);
}

void strided_sum(const Tensor& x, const StridedMap& outer, const StridedMap& inner, int64_t count, Tensor& out) {
  const float* px = x.data();
  float* po = out.data();
  const int64_t n = out.numel();
#pragma omp parallel for if (n * count > (1 << 16))
  for (int64_t j = 0; j < n; ++j) {
    const int64_t base = cuda::strided_offset(outer, j) - inner.base;
    float s = 0.0f;
    for (int64_t k = 0; k < count; ++k) s += px[base + cuda::strided_offset(inner, k)];
    po[j] = s;
  }
}

void pad(const Tensor& x, const PadMap& map, float value, Tensor& out) {
  const float* px = x.data();
  float* po = out.data();
  const int64_t n = out.numel();
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = cuda::pad_source(map, i);
    po[i] = src < 0 ? value : px[src];
  }
}

void where(const Tensor& c, const StridedMap& mc, const Tensor& a, const StridedMap& ma, const Tensor& b,
           const StridedMap& mb, Tensor& out) {
  const float* pc = c.data();
  const float* pa = a.data();
  const float* pb = b.data();
  float* po = out.data();
  const int64_t n = out.numel();
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    po[i] = pc[cuda::strided_offset(mc, i)] != 0.0f ? pa[cuda::strided_offset(ma, i)] : pb[cuda::strided_offset(mb, i)];
}

void clip(const Tensor& x, float lo, float hi, Tensor& out) {
  const float* px = x.data();
  float* po = out.data();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) po[i] = px[i] < lo ? lo : (px[i] > hi ? hi : px[i]);
}

void clip_backward(const Tensor& grad_out, const Tensor& x, float lo, float hi, Tensor& grad_in) {
  const float* g = grad_out.data();
  const float* px = x.data();
  float* gi = grad_in.data();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) gi[i] = px[i] >= lo && px[i] <= hi ? g[i] : 0.0f;
}

void batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out) {
  const int64_t batch = out.size(0);
  const int64_t ar = a.size(1), ac = a.size(2), br = b.size(1), bc = b.size(2);
  const int64_t m = out.size(1), n = out.size(2);
  for (int64_t i = 0; i < batch; ++i) {
    MapC ma(a.data() + i * ar * ac, ar, ac);
    MapC mb(b.data() + i * br * bc, br, bc);
    Map mo(out.data() + i * m * n, m, n);
    if (!trans_a && !trans_b) mo.noalias() = ma * mb;
    else if (trans_a && !trans_b) mo.noalias() = ma.transpose() * mb;
    else if (!trans_a && trans_b) mo.noalias() = ma * mb.transpose();
    else mo.noalias() = ma.transpose() * mb.transpose();
  }
}

}  // namespace quartet::engine::cpu

#include "engine/cpu/dense.h"

#include <Eigen/Core>

namespace quartet::engine::cpu {
namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapC = Eigen::Map<const RowMat, Eigen::Aligned64>;
using Map = Eigen::Map<RowMat, Eigen::Aligned64>;
}  // namespace

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out, float alpha,
          float beta) {
  MapC ma(a.data(), a.size(0), a.size(1));
  MapC mb(b.data(), b.size(0), b.size(1));
  Map mo(out.data(), out.size(0), out.size(1));
  if (beta == 0.0f) mo.setZero();
  else if (beta != 1.0f) mo *= beta;
  if (!trans_a && !trans_b) mo.noalias() += alpha * ma * mb;
  else if (trans_a && !trans_b) mo.noalias() += alpha * ma.transpose() * mb;
  else if (!trans_a && trans_b) mo.noalias() += alpha * ma * mb.transpose();
  else mo.noalias() += alpha * ma.transpose() * mb.transpose();
}

void add_row_bias(Tensor& out, const Tensor& bias) {
  Map mo(out.data(), out.size(0), out.size(1));
  Eigen::Map<const Eigen::RowVectorXf> mb(bias.data(), bias.numel());
  mo.rowwise() += mb;
}

void sum_rows(const Tensor& x, Tensor& out) {
  MapC mx(x.data(), x.size(0), x.size(1));
  Eigen::Map<Eigen::RowVectorXf> mo(out.data(), out.numel());
  mo = mx.colwise().sum();
}

}  // namespace quartet::engine::cpu
